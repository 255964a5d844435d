import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import WhisperShared

/// Forwards checked frames to a service's internal endpoint (auth today) over the
/// shared pooled HTTP client, and returns the server frame it answers with.
struct ServiceClient: Sendable {
    let baseURL: String
    let internalToken: String
    let timeout: TimeAmount = .seconds(10)

    func forward<P: ClientPayload>(_ payload: P, requestId: String?, context: ConnectionContext) async throws -> [UInt8] {
        var request = HTTPClientRequest(url: baseURL + InternalAPI.framePath(P.frameType))
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: InternalAPI.tokenHeader, value: internalToken)
        let body = try JSONEncoder().encode(InternalFrameRequest(requestId: requestId, context: context, payload: payload))
        request.body = .bytes(ByteBuffer(bytes: body))
        let response = try await HTTPClient.shared.execute(request, timeout: timeout)
        let bytes = try await response.body.collect(upTo: 4 << 20)
        guard response.status == .ok else {
            throw ServiceClientError(status: Int(response.status.code))
        }
        return Array(bytes.readableBytesView)
    }
}

struct ServiceClientError: Error, CustomStringConvertible {
    var status: Int
    var description: String { "internal endpoint answered \(status)" }
}

extension ServiceClient: RedactedDescription {}
