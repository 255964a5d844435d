import Foundation
import HTTPTypes
import Hummingbird

/// A 200 JSON answer for a client endpoint, never cached (it carries per-user data or
/// signed URLs).
public enum JSONResponse {
    public static func make(_ body: [String: Any]) throws -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        headers[.cacheControl] = "no-store"
        let data = try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys, .withoutEscapingSlashes])
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// A 200 JSON answer of an `Encodable` body (keys sorted), with `cacheControl`.
    public static func make(encoding body: some Encodable, cacheControl: String = "no-store") throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return raw(ByteBuffer(data: try encoder.encode(body)), cacheControl: cacheControl)
    }

    /// A 200 answer of a body that is JSON already.
    public static func raw(_ body: ByteBuffer, cacheControl: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        headers[.cacheControl] = cacheControl
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: body))
    }
}

extension RateLimiter {
    /// Takes a token of `limit`'s bucket for `key`, or answers an HTTP request 429 with
    /// the limit's refusal and `Retry-After`.
    public func chargeRequest(_ limit: Limit, key: String, rules: LimitRules) async throws {
        if case .limited(let retry) = try await take(limit, key: key, rules: rules) {
            throw WhisperHTTPError(.rateLimited, limit.refusal(retryAfterMs: retry), headers: [.retryAfter: "\(max(1, retry / 1000))"])
        }
    }
}
