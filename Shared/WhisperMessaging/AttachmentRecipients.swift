import Foundation
import PostgresNIO
import WhisperShared

/// Who an attachment was sent to (`attachment_recipients`), recorded by the router for
/// each message that carries one: the download endpoint lets those identities fetch
/// it, and gc-worker deletes the blob once each of them has taken its message.
public struct AttachmentRecipients: Sendable {
    let postgres: PostgresClient

    public init(postgres: PostgresClient) {
        self.postgres = postgres
    }

    /// Records `recipient` for the sender's upload named by `pointer`, in one statement.
    /// Refused when the objectKey is not a live upload of this sender (forwarding
    /// another's attachment means uploading it again) or its size differs from the
    /// upload's declaration.
    ///
    /// The row is written before the message is stored, so a send whose store is then
    /// refused leaves a row that gc-worker later finds settled (no such message pending).
    /// A resend of the same message that is accepted afterwards re-arms it (`acked_at`
    /// back to NULL), so the blob it points to is not collected under it; the upload's
    /// row is read `FOR SHARE`, so a collection that has claimed it finishes first and
    /// the resend is then refused rather than pointing at a deleted blob (issue 34).
    public func admit(_ pointer: AttachmentPointer, sender: String, recipient: String, messageId: String) async throws {
        let rows = try await postgres.query("""
            WITH owned AS (
                SELECT object_key, size_bytes FROM attachments
                WHERE object_key = \(pointer.objectKey) AND uploader_id = \(sender)
                  AND deleted_at IS NULL AND rejected_at IS NULL AND expires_at > now()
                FOR SHARE
            ), recorded AS (
                INSERT INTO attachment_recipients (object_key, recipient_id, message_id)
                SELECT object_key, \(recipient), \(messageId)::uuid FROM owned WHERE size_bytes = \(pointer.ciphertextSize)
                ON CONFLICT (object_key, recipient_id, message_id)
                DO UPDATE SET acked_at = NULL, recorded_at = now() WHERE attachment_recipients.acked_at IS NOT NULL
            )
            SELECT size_bytes FROM owned
            """)
        var declared: Int64?
        for try await size in rows.decode(Int64.self) { declared = size }
        guard let declared else {
            throw WhisperError(.forbidden, "attachment.objectKey is not an upload of this sender (upload it with /attachments/presign)")
        }
        guard declared == pointer.ciphertextSize else {
            throw WhisperError(.invalidPayload, "attachment.ciphertextSize is \(pointer.ciphertextSize); the upload declared \(declared)")
        }
    }
}
