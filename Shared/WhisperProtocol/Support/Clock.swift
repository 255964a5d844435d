import Foundation

public enum Clock {
    /// Milliseconds since 1970, as every timestamp in the protocol.
    public static func millisecondsNow() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded())
    }

    /// Whether `timestamp` (from a client) is within `TIMESTAMP_SKEW_MS` of `now`, for any
    /// value: the distance is worked out without overflow.
    public static func isWithinSkew(_ timestamp: Int64, of now: Int64, skew: Int64 = Int64(Limits.TIMESTAMP_SKEW_MS)) -> Bool {
        let (distance, overflow) = timestamp.subtractingReportingOverflow(now)
        return !overflow && distance >= -skew && distance <= skew
    }

    /// Milliseconds from `start` (a time another process wrote) to `now`: 0 when `start`
    /// lies ahead, Int64.max when the distance does not fit.
    public static func elapsedMilliseconds(since start: Int64, now: Int64 = millisecondsNow()) -> Int64 {
        let (distance, overflow) = now.subtractingReportingOverflow(start)
        if overflow { return start > now ? 0 : .max }
        return max(0, distance)
    }

    /// Milliseconds as nanoseconds for a histogram, saturating.
    public static func nanoseconds(ofMilliseconds milliseconds: Int64) -> Int64 {
        let (value, overflow) = milliseconds.multipliedReportingOverflow(by: 1_000_000)
        return overflow ? (milliseconds < 0 ? .min : .max) : value
    }
}
