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
}

extension RateLimiter {
    /// Takes a token for `action` of `whisperId`, or answers 429 with `Retry-After`.
    public func charge(_ action: String, _ whisperId: String, _ rule: RateLimitRule) async throws {
        if case .limited(let retry) = try await take(action, key: whisperId, rule: rule) {
            throw WhisperHTTPError(.rateLimited, "too many \(action) requests; retry in \(retry) ms", headers: [.retryAfter: "\(max(1, retry / 1000))"])
        }
    }
}
