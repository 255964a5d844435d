import Testing
@testable import WhisperShared

/// The gateway's in-memory limits: buckets refill with time, and a table of them stays
/// within its bound on keys however many addresses show up.
@Suite struct LocalBucketTests {
    let rule = RateLimitRule(capacity: 2, period: .seconds(60))

    @Test func aBucketRefillsAtItsRate() {
        let start = ContinuousClock.now
        var bucket = LocalBucket(full: rule, now: start)
        let first = bucket.take(rule, now: start), second = bucket.take(rule, now: start), third = bucket.take(rule, now: start)
        #expect(first && second && !third)
        let after29 = bucket.take(rule, now: start + .seconds(29))
        #expect(!after29, "half a token after 29 s")
        let after31 = bucket.take(rule, now: start + .seconds(31))
        #expect(after31, "one token after 30 s")
        let fullAt31 = bucket.isFull(rule, now: start + .seconds(31)), fullAt120 = bucket.isFull(rule, now: start + .seconds(120))
        #expect(!fullAt31 && fullAt120)
    }

    @Test func aFullTableSharesOneBucketUntilIdleKeysAreForgotten() {
        let start = ContinuousClock.now
        let table = LocalBucketTable(rule: rule, maxKeys: 3)
        for key in ["a", "b", "c"] { #expect(table.take(key, now: start)) }
        #expect(table.count == 3)
        // New keys while every bucket is in use share the overflow bucket.
        #expect(table.take("d", now: start) && table.take("e", now: start))
        #expect(!table.take("f", now: start))
        #expect(table.count == 3)
        // A key already in the table keeps its own bucket.
        #expect(table.take("a", now: start) && !table.take("a", now: start))
        // Once buckets have refilled, a new key's sweep forgets them.
        #expect(table.take("g", now: start + .seconds(120)))
        #expect(table.count == 1)
    }
}
