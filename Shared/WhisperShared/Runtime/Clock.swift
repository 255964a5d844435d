import Foundation

public enum Clock {
    /// Milliseconds since 1970, as every timestamp in the protocol.
    public static func millisecondsNow() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded())
    }
}
