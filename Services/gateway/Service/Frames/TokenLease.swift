import Foundation
import Logging
import NIOCore
import NIOWebSocket
import Prometheus
import Synchronization
import WhisperShared

/// Tokens one socket took ahead from a bucket of its identity (`RateLimiter.lease`), so
/// that a busy sender costs a bucket round trip per lease instead of per frame. One
/// identity holds one live socket and its frames are handled one at a time, so the
/// socket is the only spender. A lease starts at one token and doubles (up to `max`)
/// while leases follow each other within `lifetime`; tokens not spent within `lifetime`
/// are dropped, so a sender cannot save up a burst beyond its bucket, and a socket that
/// closes loses at most what it leased last (never more than the rule allows overall).
struct TokenLease {
    enum Kind: Hashable {
        case send, receipt
    }

    static let lifetime: UInt64 = 1_000_000_000

    private var tokens = 0
    private var validUntil: UInt64 = 0
    private var size = 1
    private var lastLeaseAt: UInt64?

    mutating func spend(now: UInt64) -> Bool {
        guard tokens > 0, now < validUntil else {
            tokens = 0
            return false
        }
        tokens -= 1
        return true
    }

    mutating func nextSize(now: UInt64, max: Int) -> Int {
        if let last = lastLeaseAt, now &- last < Self.lifetime {
            size = Swift.min(Swift.max(1, max), size &* 2)
        } else {
            size = 1
        }
        lastLeaseAt = now
        return size
    }

    mutating func received(_ granted: Int, now: UInt64) {
        tokens = Swift.max(0, granted - 1)
        validUntil = now &+ Self.lifetime
    }
}
