/// The frozen error codes (docs/protocol.md section 2). Clients switch on these; never rename one.
public enum ErrorCode: String, Codable, Sendable, CaseIterable {
    case notRegistered = "NOT_REGISTERED"
    case authFailed = "AUTH_FAILED"
    case invalidPayload = "INVALID_PAYLOAD"
    case invalidTimestamp = "INVALID_TIMESTAMP"
    case rateLimited = "RATE_LIMITED"
    case userBanned = "USER_BANNED"
    case notFound = "NOT_FOUND"
    case forbidden = "FORBIDDEN"
    case internalError = "INTERNAL_ERROR"

    /// The HTTP status the HTTP endpoints answer this code with.
    public var httpStatus: Int {
        switch self {
        case .notRegistered, .authFailed: 401
        case .invalidPayload, .invalidTimestamp: 400
        case .rateLimited: 429
        case .userBanned, .forbidden: 403
        case .notFound: 404
        case .internalError: 500
        }
    }
}

/// A refusal to show a client: a frozen code and a message safe to show (it never
/// echoes tokens, keys or payload content).
public struct WhisperError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: ErrorCode
    public var message: String

    public init(_ code: ErrorCode, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
