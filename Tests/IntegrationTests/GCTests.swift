import AttachmentSignerService
import Foundation
@testable import GCWorkerService
import Testing
import WhisperClient
import WhisperShared

/// gc-worker's attachment collection on real Postgres, Redis and moto.
@Suite struct GCTests {
    @discardableResult
    static func collector<T: Sendable>(
        _ stack: MessagingStack, store: S3Client, batchSize: Int = 200, _ body: @Sendable (AttachmentCollector) async throws -> T
    ) async throws -> T {
        try await stack.withPostgres { postgres in
            try await stack.withRedis { redis in
                let metrics = ServiceMetrics(service: "gc-worker", instanceID: "gc-test-\(RandomID.uuid())")
                return try await body(AttachmentCollector(
                    postgres: postgres, redis: redis, store: store, batchSize: batchSize, recipientGrace: .zero,
                    metrics: GCMetrics(metrics: metrics), logger: TestServers.logger
                ))
            }
        }
    }

    /// An upload of alice's sent to `recipients` in one message each; its objectKey.
    static func sendAttachment(_ signer: AttachmentTests.Signer, from alice: TestUser, to recipients: [TestUser]) async throws -> String {
        let sealed = AttachmentCrypto.seal(SecureBytes.random(3_000))
        let presigned = try await AttachmentTests.presign(signer, alice, size: sealed.ciphertext.count)
        let objectKey = try #require(presigned.json["objectKey"] as? String)
        let put = try await AttachmentTests.transfer(
            .PUT, try #require(presigned.json["uploadUrl"] as? String), body: sealed.ciphertext,
            headers: try #require(presigned.json["headers"] as? [String: String])
        )
        #expect(put.status == 200)
        for recipient in recipients {
            var message = alice.message("attached", to: recipient)
            message.msgType = .file
            message.attachment = AttachmentCrypto.pointer(to: sealed, objectKey: objectKey, contentType: "application/pdf", from: alice.keys, to: recipient.peerKeys)
            try await alice.connection.send(message)
        }
        return objectKey
    }

    static func rows(_ stack: MessagingStack, _ objectKey: String) async throws -> Int {
        try await stack.withPostgres { postgres in
            try await postgres.query("SELECT count(*)::int FROM attachments WHERE object_key = \(objectKey)").decode(Int.self).first { _ in true } ?? -1
        }
    }

    @Test func anAttachmentGoesOnceEveryRecipientHasItsMessageAndNotBefore() async throws {
        try await AttachmentTests.start().running { signer in
            let alice = try await signer.stack.user(on: 0)
            let bob = try await signer.stack.user(on: 1)
            let carol = try await signer.stack.user(on: 1)
            let objectKey = try await Self.sendAttachment(signer, from: alice, to: [bob, carol])

            try await Self.collector(signer.stack, store: signer.store) { collector in
                // Nobody has it yet.
                #expect(try await collector.run().deleted == 0)
                #expect(try await signer.store.head(objectKey) != nil)

                // Bob takes his; carol has not: still kept.
                let forBob = try #require(try await bob.events(.messageReceived).first?.payload(as: MessageReceived.self))
                try await bob.connection.acknowledge(forBob)
                try await waitUntil { try await collector.run().settled == 1 }
                #expect(try await collector.run().deleted == 0)
                #expect(try await signer.store.head(objectKey) != nil)
                #expect(try await AttachmentTests.download(signer, objectKey, as: carol).status == 200)

                // Carol too: the object and its rows go.
                let forCarol = try #require(try await carol.events(.messageReceived).first?.payload(as: MessageReceived.self))
                try await carol.connection.acknowledge(forCarol)
                var deleted = 0
                try await waitUntil {
                    deleted += try await collector.run().deleted
                    return deleted == 1
                }
                #expect(try await signer.store.head(objectKey) == nil)
                #expect(try await Self.rows(signer.stack, objectKey) == 0)
                #expect(try await AttachmentTests.download(signer, objectKey, as: carol).status == 404)
            }
        }
    }

    @Test func expiredAndRejectedAttachmentsGoUnansweredOnesStayUntilTheTTL() async throws {
        try await AttachmentTests.start().running { signer in
            let alice = try await signer.stack.user(on: 0)
            let bob = try await signer.stack.offlineUser(on: 1)
            let waiting = try await Self.sendAttachment(signer, from: alice, to: [bob])
            // An upload that differs from its declaration, found out at its first download.
            let presigned = try await AttachmentTests.presign(signer, alice, size: 100)
            let mismatched = try #require(presigned.json["objectKey"] as? String)
            try await signer.store.put(mismatched, body: SecureBytes.random(200), contentType: "application/octet-stream")
            #expect(try await AttachmentTests.download(signer, mismatched, as: alice).status == 404)

            try await Self.collector(signer.stack, store: signer.store) { collector in
                let now = try await collector.run()
                #expect(now.deleted == 1)
                #expect(try await signer.store.head(mismatched) == nil)
                #expect(try await signer.store.head(waiting) != nil)
                // 30 days on (the test's clock), bob never fetched: it goes all the same.
                let later = try await collector.run(now: Date().addingTimeInterval(31 * 86_400))
                #expect(later.deleted == 1 && later.bytes > 0)
                #expect(try await signer.store.head(waiting) == nil)
                #expect(try await Self.rows(signer.stack, waiting) == 0)
            }
        }
    }

    /// Two collectors at once, small batches: each expired attachment is deleted by
    /// exactly one of them, and none is left.
    @Test func twoCollectorsAtOnceDeleteEachAttachmentOnce() async throws {
        try await AttachmentTests.start().running { signer in
            let alice = try await signer.stack.user(on: 0)
            var keys: [String] = []
            for _ in 0..<40 {
                let presigned = try await AttachmentTests.presign(signer, alice, size: 64)
                let objectKey = try #require(presigned.json["objectKey"] as? String)
                try await signer.store.put(objectKey, body: SecureBytes.random(64), contentType: "application/octet-stream")
                keys.append(objectKey)
            }
            let later = Date().addingTimeInterval(31 * 86_400)
            let store = signer.store
            let stack = signer.stack
            async let first = Self.collector(stack, store: store, batchSize: 3) { try await $0.run(now: later).deleted }
            async let second = Self.collector(stack, store: store, batchSize: 3) { try await $0.run(now: later).deleted }
            let (a, b) = try await (first, second)
            #expect(a + b == keys.count)
            for key in keys {
                #expect(try await store.head(key) == nil)
            }
            let left = try await stack.withPostgres { postgres in
                try await postgres.query("SELECT count(*)::int FROM attachments").decode(Int.self).first { _ in true }
            }
            #expect(left == 0)
        }
    }

    /// Item 3 of issue 34: an upload that no message named is collected a day after its
    /// presign; one that was sent stays until its recipients take it.
    @Test func aNeverSentUploadGoesAfterADayAndASentOneStays() async throws {
        try await AttachmentTests.start().running { signer in
            let alice = try await signer.stack.user(on: 0)
            let bob = try await signer.stack.offlineUser(on: 1)
            let sent = try await Self.sendAttachment(signer, from: alice, to: [bob])
            let presigned = try await AttachmentTests.presign(signer, alice, size: 100)
            let unsent = try #require(presigned.json["objectKey"] as? String)
            try await signer.store.put(unsent, body: SecureBytes.random(100), contentType: "application/octet-stream")
            try await Self.collector(signer.stack, store: signer.store) { collector in
                // Within the day: both stay.
                #expect(try await collector.run(now: Date().addingTimeInterval(23 * 3_600)).deleted == 0)
                // A day on: the unsent one goes; the sent one waits for bob.
                let later = try await collector.run(now: Date().addingTimeInterval(25 * 3_600))
                #expect(later.deleted == 1)
                #expect(try await signer.store.head(unsent) == nil)
                #expect(try await signer.store.head(sent) != nil)
            }
        }
    }
}
