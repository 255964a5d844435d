#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The process's limit on open file descriptors (`RLIMIT_NOFILE`).
public enum OpenFileLimit {
    /// Raises the soft limit to the hard one (allowed without privileges) and returns
    /// the soft limit in force afterwards.
    @discardableResult
    public static func raiseToMaximum() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        // RLIM_INFINITY and other huge values: anything past Int.max is as good as none.
        return limit.rlim_cur >= UInt64(Int.max) ? Int.max : Int(limit.rlim_cur)
    }
}
