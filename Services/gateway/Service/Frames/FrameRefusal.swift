import WhisperShared

/// A frame turned away by the desk that serves it; `FrameHandler` answers it. `counted`:
/// the client's doing, charged to the socket's and its address's refusals (too many
/// close the socket); otherwise (a busy server) answered only.
struct FrameRefusal: Error {
    let code: ErrorCode
    let message: String
    let counted: Bool

    static func counted(_ code: ErrorCode, _ message: String) -> FrameRefusal {
        FrameRefusal(code: code, message: message, counted: true)
    }

    /// Over `limit`, in the limit's own words (`RATE_LIMITED`), counted.
    static func over(_ limit: Limit, retryAfterMs: Int?) -> FrameRefusal {
        .counted(.rateLimited, limit.refusal(retryAfterMs: retryAfterMs))
    }

    /// The server is busy: answered, not held against the client.
    static func busy(_ limits: FrameLimits) -> FrameRefusal {
        limits.busyRefusals.increment()
        return FrameRefusal(code: .rateLimited, message: limits.busyRefusal, counted: false)
    }
}
