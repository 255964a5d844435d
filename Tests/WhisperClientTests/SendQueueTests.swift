import Foundation
import Synchronization
import Testing
import WhisperClient
import WhisperShared

@Suite struct SendQueueTests {
    func message(_ id: String = UUID().uuidString.lowercased()) -> SendMessage {
        SendMessage(
            sessionToken: String(repeating: "t", count: 43), .init(messageId: id, from: "WSP-AAAA-BBBB-CCCC", to: "WSP-DDDD-EEEE-FFFF",
            msgType: .text, timestamp: 1, nonce: String(repeating: "A", count: 32), ciphertext: "AAAA", sig: String(repeating: "A", count: 86) + "==")
        )
    }

    struct Offline: Error {}

    @Test func aGroupMessagesCopiesAreSentRetriedAndReceiptedEachOnItsOwn() async throws {
        let queue = SendQueue(store: MemoryOutboxStore())
        let id = UUID().uuidString.lowercased()
        let copies = ["WSP-DDDD-EEEE-FFFF", "WSP-GGGG-HHHH-JJJJ"].map { member in
            var copy = message(id).fields
            copy.to = member
            return GroupSendMessage(sessionToken: String(repeating: "t", count: 43), .init(groupId: "g1", message: copy))
        }
        try await queue.enqueue(group: copies)
        try await queue.enqueue(group: copies)  // again: nothing more
        #expect(try await queue.all().count == 2)
        // The first member's copy is refused for now; the other goes.
        let sent = Mutex<[String]>([])
        let now = Clock.millisecondsNow()
        try await queue.flush(now: now) { outgoing in
            #expect(outgoing.groupId == "g1" && outgoing.message.messageId == id)
            if outgoing.message.to == copies[0].message.to { throw WhisperClientError.refused(.rateLimited, "later") }
            sent.withLock { $0.append(outgoing.message.to) }
        }
        #expect(sent.withLock { $0 } == [copies[1].message.to])
        #expect(try await queue.state(of: id) == .queued, "as far as its slowest copy")
        // Its retry sends that copy alone, with the same messageId.
        try await queue.flush(now: now + 3_600_000) { outgoing in sent.withLock { $0.append(outgoing.message.to) } }
        #expect(sent.withLock { $0 } == [copies[1].message.to, copies[0].message.to])
        // A member's receipt moves that member's copy only.
        try await queue.receipt(messageId: id, status: .read, from: copies[0].message.to)
        #expect(try await queue.all().map(\.state) == [.read, .sent])
        #expect(try await queue.state(of: id) == .sent)
    }

    @Test func statesMoveForwardFromQueuedToRead() async throws {
        let queue = SendQueue(store: MemoryOutboxStore())
        let outgoing = message()
        try await queue.enqueue(outgoing)
        #expect(try await queue.state(of: outgoing.messageId) == .queued)
        try await queue.flush { _ in }
        #expect(try await queue.state(of: outgoing.messageId) == .sent)
        try await queue.receipt(messageId: outgoing.messageId, status: .read)
        #expect(try await queue.state(of: outgoing.messageId) == .read)
        // A late "delivered" does not move it back.
        try await queue.receipt(messageId: outgoing.messageId, status: .delivered)
        #expect(try await queue.state(of: outgoing.messageId) == .read)
        try await queue.pruneFinished()
        #expect(try await queue.all().isEmpty)
    }

    @Test func failuresBackOffAndGiveUpAfterTenAttempts() async throws {
        let queue = SendQueue(store: MemoryOutboxStore(), policy: RetryPolicy(maxAttempts: 10, initial: .milliseconds(100), maximum: .seconds(5)))
        let outgoing = message()
        try await queue.enqueue(outgoing)
        var now: Int64 = 1_000_000
        var previousDue: Int64 = 0
        for attempt in 1...10 {
            try await queue.flush(now: now) { _ in throw Offline() }
            let state = try #require(try await queue.all().first)
            #expect(state.attempts == attempt)
            if attempt < 10 {
                #expect(state.state == .queued)
                let ceiling = Int64(Backoff.ceiling(policy: .init(initial: .milliseconds(100), maximum: .seconds(5)), attempt: attempt - 1).milliseconds)
                #expect(state.nextAttemptAt > now && state.nextAttemptAt <= now + ceiling)
                // Not due yet: flushing before the time sends nothing.
                try await queue.flush(now: state.nextAttemptAt - 1) { _ in Issue.record("sent before its time") }
                previousDue = state.nextAttemptAt
                now = previousDue
            } else {
                #expect(state.state == .failed)
            }
        }
    }

    @Test func aClosedSocketSpendsNoAttemptAndAFinalRefusalFailsAtOnce() async throws {
        let queue = SendQueue(store: MemoryOutboxStore())
        let first = message(), second = message()
        try await queue.enqueue(first)
        try await queue.enqueue(second)
        let sent = Mutex<[String]>([])
        try await queue.flush { outgoing in
            let message = outgoing.message
            sent.withLock { $0.append(message.messageId) }
            throw WhisperClientError.closed(code: nil)
        }
        // The flush stopped at the closed socket; nothing counted as an attempt.
        #expect(sent.withLock { $0 } == [first.messageId])
        #expect(try await queue.all().map(\.attempts) == [0, 0])
        #expect(try await queue.all().map(\.state) == [.queued, .queued])
        try await queue.flush { outgoing in
            let message = outgoing.message
            if message.messageId == first.messageId { throw WhisperClientError.refused(.forbidden, "no") }
            throw WhisperClientError.refused(.rateLimited, "later")
        }
        #expect(try await queue.all().map(\.state) == [.failed, .queued])
    }

    @Test func onceTheServerTakesOneWhatWaitsOutABackoffGoesToo() async throws {
        let queue = SendQueue(store: MemoryOutboxStore(), policy: RetryPolicy(maxAttempts: 10, initial: .seconds(10), maximum: .seconds(60)))
        let early = message(), late = message()
        try await queue.enqueue(early)
        let now: Int64 = 1_000_000
        try await queue.flush(now: now) { _ in throw WhisperClientError.refused(.internalError, "down") }
        #expect(try #require(try await queue.all().first).nextAttemptAt > now)
        // The server is back: the next message goes, and the one backing off with it.
        try await queue.enqueue(late)
        let sent = Mutex<[String]>([])
        try await queue.flush(now: now + 1) { outgoing in sent.withLock { $0.append(outgoing.message.messageId) } }
        #expect(sent.withLock { $0 } == [late.messageId, early.messageId])
        #expect(try await queue.all().map(\.state) == [.sent, .sent])
    }

    /// While a send is awaited the outbox may change (a receipt pruned, a message added):
    /// each message's outcome lands on that message.
    @Test func anOutboxThatChangesDuringASendKeepsEachOutcomeOnItsMessage() async throws {
        let queue = SendQueue(store: MemoryOutboxStore())
        let done = message(), second = message(), third = message()
        try await queue.enqueue(done)
        try await queue.flush { _ in }
        try await queue.receipt(messageId: done.messageId, status: .read)
        try await queue.enqueue(second)
        try await queue.enqueue(third)
        let sent = Mutex<[String]>([])
        try await queue.flush { outgoing in
            let message = outgoing.message
            // The read message leaves the outbox while the second is on its way.
            if message.messageId == second.messageId { try await queue.pruneFinished() }
            sent.withLock { $0.append(message.messageId) }
        }
        #expect(sent.withLock { $0 } == [second.messageId, third.messageId])
        let states = try await queue.all().map { ($0.message.messageId, $0.state, $0.attempts) }
        #expect(states.map(\.0) == [second.messageId, third.messageId])
        #expect(states.allSatisfy { $0.1 == .sent && $0.2 == 1 }, "\(states)")
    }

    @Test func theOutboxSurvivesARestart() async throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("outbox-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: url) }
        let first = SendQueue(store: FileOutboxStore(url: url))
        let a = message()
        let b = message()
        try await first.enqueue(a)
        try await first.enqueue(b)
        try await first.flush { sent in if sent.message.messageId == b.messageId { throw Offline() } }

        let restarted = SendQueue(store: FileOutboxStore(url: url))
        #expect(try await restarted.state(of: a.messageId) == .sent)
        #expect(try await restarted.state(of: b.messageId) == .queued)
        let resent = Recorder()
        try await restarted.flush(now: Clock.millisecondsNow() + 3_600_000) { await resent.add($0.message.messageId) }
        #expect(await resent.ids == [b.messageId])
    }

    /// A change appends to the file what it touched, never rewriting what was there; the
    /// file is replaced only at compaction, so it stays within about twice the outbox; a
    /// restart reads every state back.
    @Test func theFileOutboxIsAppendedToAndCompacted() async throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("outbox-\(UUID().uuidString).jsonl")
        defer { try? FileManager.default.removeItem(at: url) }
        let queue = SendQueue(store: FileOutboxStore(url: url))
        let messages = (0..<40).map { _ in message() }
        for outgoing in messages { try await queue.enqueue(outgoing) }
        try await queue.flush { _ in }
        var before = try Data(contentsOf: url)
        var appended = 0, replaced = 0
        for outgoing in messages {
            try await queue.receipt(messageId: outgoing.messageId, status: .delivered)
            let after = try Data(contentsOf: url)
            if after.count > before.count, after.prefix(before.count) == before { appended += 1 } else { replaced += 1 }
            before = after
        }
        // 40 enqueued, 40 sending, 40 sent and 40 delivered lines: replaced once past
        // twice the 40 entries and 64 more; every other change only appended.
        #expect(appended >= 38 && replaced >= 1 && replaced <= 2, "appended \(appended), replaced \(replaced)")
        let lines = try String(contentsOf: url, encoding: .utf8).split(separator: "\n").count
        #expect(lines <= 2 * messages.count + 64, "\(lines) lines")
        let restarted = SendQueue(store: FileOutboxStore(url: url))
        #expect(try await restarted.all().map(\.message.messageId) == messages.map(\.messageId))
        #expect(try await restarted.all().allSatisfy { $0.state == .delivered })
        // A line cut short by a crash is skipped.
        let handle = try FileHandle(forWritingTo: url)
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("{\"set\":{\"mess".utf8))
        try handle.close()
        #expect(try await SendQueue(store: FileOutboxStore(url: url)).all().count == messages.count)
    }

    /// The outbox keeps the newest `settledKept` delivered, read or failed messages, and
    /// drops a sent one whose receipt can no longer come; what waits to be sent stays.
    @Test func settledAndLongSentMessagesArePruned() async throws {
        let queue = SendQueue(store: MemoryOutboxStore())
        let total = SendQueue.settledKept + 10
        let messages = (0..<total).map { _ in message() }
        for outgoing in messages { try await queue.enqueue(outgoing) }
        try await queue.flush { _ in }
        for outgoing in messages { try await queue.receipt(messageId: outgoing.messageId, status: .read) }
        #expect(try await queue.all().count == SendQueue.settledKept)
        #expect(try await queue.state(of: messages[0].messageId) == nil)
        #expect(try await queue.state(of: messages[9].messageId) == nil)
        #expect(try await queue.state(of: messages[10].messageId) == .read)
        #expect(try await queue.state(of: messages[total - 1].messageId) == .read)

        // A restarted app whose outbox holds one message sent eight days ago.
        let store = MemoryOutboxStore()
        let earlier = SendQueue(store: store)
        let old = message(), recent = message(), waiting = message()
        try await earlier.enqueue(old)
        try await earlier.enqueue(recent)
        try await earlier.flush { _ in }
        var held = try await earlier.all()
        held[0].sentAt = Clock.millisecondsNow() - SendQueue.sentKeptMs - 86_400_000
        try await store.replace(with: held)
        let restarted = SendQueue(store: store)
        try await restarted.enqueue(waiting)
        #expect(try await restarted.state(of: old.messageId) == nil, "sent over a week ago: no receipt can come")
        #expect(try await restarted.state(of: recent.messageId) == .sent)
        #expect(try await restarted.state(of: waiting.messageId) == .queued)
        #expect(try await store.load().map(\.message.messageId) == [recent.messageId, waiting.messageId])
    }

    /// A thousand senders of one message each (or a hostile server's invented ones) fill
    /// at most `total` IDs: the conversations least recently heard from go whole, and a
    /// contact heard from all along stays.
    @Test func theDeduplicatorForgetsTheConversationsLeastRecentlyHeardFromPastItsTotal() {
        var dedupe = MessageDeduplicator(capacity: 3, total: 10)
        var last = ""
        for index in 0..<1_000 {
            let new = dedupe.firstSighting("m", in: "stranger \(index)")
            #expect(new)
            if index % 3 == 0 {
                last = "from a friend \(index)"
                let fresh = dedupe.firstSighting(last, in: "friend")
                #expect(fresh)
            }
            #expect(dedupe.count <= 10)
        }
        #expect(dedupe.conversations <= 10)
        #expect(dedupe.contains(last, in: "friend"))
        let copy = dedupe.firstSighting(last, in: "friend")
        #expect(!copy, "a copy of the friend's last message is still dropped")
        #expect(dedupe.contains("m", in: "stranger 999"))
        #expect(!dedupe.contains("m", in: "stranger 0"))
        #expect(dedupe.remembered().count == dedupe.count)
    }

    @Test func enqueuingTheSameMessageTwiceKeepsOne() async throws {
        let queue = SendQueue(store: MemoryOutboxStore())
        let outgoing = message()
        try await queue.enqueue(outgoing)
        try await queue.enqueue(outgoing)
        #expect(try await queue.all().count == 1)
    }
}

actor Recorder {
    var ids: [String] = []
    func add(_ id: String) { ids.append(id) }
}

@Suite struct DeduplicatorTests {
    @Test func duplicatesAreSeenOncePerConversation() {
        var dedupe = MessageDeduplicator(capacity: 3)
        do { let seen = dedupe.firstSighting("A", in: "alice"); #expect(seen) }
        do { let seen = dedupe.firstSighting("a", in: "alice"); #expect(!seen, "message IDs compare without case") }
        do { let seen = dedupe.firstSighting("A", in: "bob"); #expect(seen, "conversations are separate") }
    }

    @Test func onlyTheLastCapacityIDsAreRemembered() {
        var dedupe = MessageDeduplicator(capacity: 3)
        for id in ["1", "2", "3", "4"] {
            let seen = dedupe.firstSighting(id, in: "c")
            #expect(seen)
        }
        do { let seen = dedupe.firstSighting("1", in: "c"); #expect(seen, "the oldest was forgotten") }
        do { let seen = dedupe.firstSighting("4", in: "c"); #expect(!seen) }
        do { let seen = dedupe.firstSighting("3", in: "c"); #expect(!seen) }
    }

    @Test func tenThousandByDefault() {
        var dedupe = MessageDeduplicator()
        for index in 0..<10_000 { _ = dedupe.firstSighting("\(index)", in: "c") }
        do { let seen = dedupe.firstSighting("0", in: "c"); #expect(!seen) }
        _ = dedupe.firstSighting("10000", in: "c")
        do { let seen = dedupe.firstSighting("0", in: "c"); #expect(seen) }
    }
}
