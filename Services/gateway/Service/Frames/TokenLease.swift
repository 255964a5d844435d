import Foundation
import Logging
import NIOCore
import NIOWebSocket
import Prometheus
import Synchronization
import WhisperShared

/// Tokens one socket took ahead from a bucket of its identity (`RateLimiter.lease`), so
/// that a busy sender costs a round trip per lease, not per frame: a lease starts at one
/// token and doubles while leases follow within `lifetime`, unspent tokens lapse after
/// it, and a busy socket asks for its next lease ahead of need (`leaseAhead`).
/// docs/architecture.md, "A message at the sender's gateway", step 1.
struct TokenLease {
    enum Kind: Hashable {
        case send, receipt
    }

    static let lifetime: UInt64 = 1_000_000_000

    private var tokens = 0
    private var validUntil: UInt64 = 0
    private var size = 1
    private var lastLeaseAt: UInt64?
    /// The answer of the lease asked for ahead of need, while it is out: a frame that
    /// finds no token waits for it before it asks the bucket itself (the bucket may hold
    /// no more than that lease took).
    private(set) var aheadAnswer: EventLoopFuture<Void>?

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

    /// A lease came back with `granted` tokens, one of them spent at once; tokens still
    /// valid are kept.
    mutating func received(_ granted: Int, now: UInt64) {
        tokens = Swift.max(0, granted - 1) + (now < validUntil ? tokens : 0)
        validUntil = now &+ Self.lifetime
    }

    /// After a spend: how many tokens to lease now, ahead of need, and the promise its
    /// answer completes (`aheadAnswer`), or nil. Only while the socket keeps leasing (its
    /// last lease within `lifetime`), once half of its last lease or less is left, and
    /// when no lease asked ahead is still on its way.
    mutating func leaseAhead(now: UInt64, max: Int, on loop: any EventLoop) -> (size: Int, answered: EventLoopPromise<Void>)? {
        guard aheadAnswer == nil, tokens * 2 <= size, let last = lastLeaseAt, now &- last < Self.lifetime else { return nil }
        let answered = loop.makePromise(of: Void.self)
        aheadAnswer = answered.futureResult
        return (nextSize(now: now, max: max), answered)
    }

    /// The lease asked ahead answered: `granted` tokens (none spent), or nil when it was
    /// refused or failed (the next frame without a token then asks, and is answered).
    mutating func receivedAhead(_ granted: Int?, now: UInt64) {
        aheadAnswer = nil
        guard let granted, granted > 0 else { return }
        tokens = granted + (now < validUntil ? tokens : 0)
        validUntil = now &+ Self.lifetime
    }
}
