import Foundation
import Hummingbird

/// An error answered over HTTP with the frozen code and the status of its row in
/// protocol.md: `{"error": {"code": ..., "message": ...}}`.
public struct WhisperHTTPError: HTTPResponseError, Sendable {
    public var error: WhisperError
    public var headers: HTTPFields

    public init(_ code: ErrorCode, _ message: String, headers: HTTPFields = [:]) {
        self.error = WhisperError(code, message)
        self.headers = headers
    }

    public var status: HTTPResponse.Status { .init(code: error.code.httpStatus) }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var headers = self.headers
        headers[.contentType] = "application/json"
        let body = ["error": ["code": error.code.rawValue, "message": error.message]]
        let data = (try? JSONSerialization.data(withJSONObject: body, options: [.sortedKeys])) ?? Data()
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}
