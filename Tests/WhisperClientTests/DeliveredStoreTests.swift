import Foundation
import Testing
import WhisperClient

/// The record of delivered messages a session keeps beside the app's data: what the file
/// holds survives a restart (a line cut short by a crash is skipped), and what the session
/// compacts it to is what it remembers, each conversation oldest first.
@Suite struct DeliveredStoreTests {
    @Test func theFileKeepsWhatWasAppendedAndSkipsATornLine() async throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("delivered-\(UUID().uuidString).jsonl")
        defer { try? FileManager.default.removeItem(at: url) }
        let store = FileDeliveredStore(url: url)
        #expect(try await store.load().isEmpty)
        let messages = (0..<5).map { DeliveredMessage(conversation: "WSP-AAAA-BBBB-CCC\($0 % 2)", messageId: UUID().uuidString) }
        for message in messages { try await store.append(message) }
        // A crash in the middle of the next line.
        let handle = try FileHandle(forWritingTo: url)
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(#"{"conversation":"WSP-AAAA"#.utf8))
        try handle.close()
        #expect(try await FileDeliveredStore(url: url).load() == messages)
        try await store.replace(with: Array(messages.suffix(2)))
        #expect(try await FileDeliveredStore(url: url).load() == Array(messages.suffix(2)))
    }

    @Test func whatIsRememberedIsEachConversationsNewestOldestFirst() {
        var memory = MessageDeduplicator(capacity: 3)
        let ids = (0..<5).map { "00000000-0000-0000-0000-00000000000\($0)" }
        for id in ids { _ = memory.firstSighting(id, in: "WSP-AAAA-BBBB-CCCC") }
        _ = memory.firstSighting(ids[0], in: "WSP-DDDD-EEEE-FFFF")
        #expect(memory.count == 4)
        #expect(memory.remembered() == ids.suffix(3).map { DeliveredMessage(conversation: "WSP-AAAA-BBBB-CCCC", messageId: $0) }
            + [DeliveredMessage(conversation: "WSP-DDDD-EEEE-FFFF", messageId: ids[0])])
        // What was remembered, loaded again, answers as the original does.
        var loaded = MessageDeduplicator(capacity: 3)
        for message in memory.remembered() { _ = loaded.firstSighting(message.messageId, in: message.conversation) }
        #expect(!loaded.contains(ids[1], in: "WSP-AAAA-BBBB-CCCC") && loaded.contains(ids[4], in: "WSP-AAAA-BBBB-CCCC"))
    }
}
