import Foundation
import PostgresNIO
import Testing
import WhisperMessaging
import WhisperShared

/// Item 10 of issue 34: a send records its attachment's recipient before the store; if
/// that store is refused, gc-worker later finds the row settled. A resend of the same
/// message that is accepted must re-arm the row so the blob is not collected under it.
@Suite struct AttachmentRecipientsTests {
    @Test func anAcceptedResendReArmsARowGCHadSettledAndACollectedUploadIsRefused() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 0)
            let objectKey = "att/2026/11/\(RandomID.uuid()).bin"
            let messageId = RandomID.uuid()
            let pointer = AttachmentPointer(
                objectKey: objectKey, contentType: "image/jpeg", ciphertextSize: 64, fileNonce: Data(count: 24).base64EncodedString(),
                fileKeyBox: FileKeyBox(nonce: Data(count: 24).base64EncodedString(), ciphertext: Data(count: 48).base64EncodedString())
            )
            try await stack.withPostgres { postgres in
                try await postgres.query("""
                    INSERT INTO attachments (object_key, uploader_id, content_type, size_bytes, purpose, expires_at)
                    VALUES (\(objectKey), \(alice.whisperId), 'image/jpeg', 64, 'message_attachment', now() + interval '1 day')
                    """)
                let recipients = AttachmentRecipients(postgres: postgres)
                @Sendable func acked() async throws -> [Bool] {
                    var states: [Bool] = []
                    let rows = try await postgres.query("SELECT acked_at IS NOT NULL FROM attachment_recipients WHERE object_key = \(objectKey)")
                    for try await state in rows.decode(Bool.self) { states.append(state) }
                    return states
                }
                // The first send: recorded; its store refused, so GC settles the row.
                try await recipients.admit(pointer, sender: alice.whisperId, recipient: bob.whisperId, messageId: messageId)
                try await postgres.query("UPDATE attachment_recipients SET acked_at = now() WHERE object_key = \(objectKey)")
                #expect(try await acked() == [true])
                // The resend that is accepted: the row is waiting for Bob again.
                try await recipients.admit(pointer, sender: alice.whisperId, recipient: bob.whisperId, messageId: messageId)
                #expect(try await acked() == [false])
                // Once GC collected the upload, a resend is refused instead of pointing at nothing.
                try await postgres.query("UPDATE attachments SET deleted_at = now() WHERE object_key = \(objectKey)")
                await #expect(throws: WhisperError.self) {
                    try await recipients.admit(pointer, sender: alice.whisperId, recipient: bob.whisperId, messageId: messageId)
                }
            }
        }
    }
}
