import Foundation
import WhisperProtocol

/// Attachments (docs/protocol.md section 12, "Attachments"): the file is sealed with a fresh key (`crypto_secretbox`),
/// the ciphertext uploaded through the presigned URL, and the key travels in the message,
/// boxed to the recipient (`fileKeyBox`).
public enum AttachmentCrypto {
    /// A file sealed for upload: upload `ciphertext` (its size is the presign's
    /// `sizeBytes`), then make a pointer per recipient with `pointer`.
    public struct SealedFile: Sendable {
        public let ciphertext: [UInt8]
        let fileKey: [UInt8]
        let fileNonce: [UInt8]
    }

    /// Seals a file under a fresh random key and nonce.
    public static func seal(_ file: [UInt8]) -> SealedFile {
        let key = SecureBytes.random(SecretBox.keyBytes)
        let nonce = SecureBytes.random(SecretBox.nonceBytes)
        return SealedFile(ciphertext: SecretBox.seal(file, nonce: nonce, key: key), fileKey: key, fileNonce: nonce)
    }

    /// The message's `attachment` for one recipient: the upload's key boxed to them.
    public static func pointer(
        to sealed: SealedFile, objectKey: String, contentType: String, from sender: WhisperKeys, to recipient: PeerKeys
    ) -> AttachmentPointer {
        let keyNonce = SecureBytes.random(X25519Box.nonceBytes)
        let box = X25519Box.seal(sealed.fileKey, nonce: keyNonce, recipientPublicKey: recipient.encPublicKey, senderPrivateKey: sender.encPrivateKey)
        return AttachmentPointer(
            objectKey: objectKey, contentType: contentType, ciphertextSize: Int64(sealed.ciphertext.count),
            fileNonce: Data(sealed.fileNonce).base64EncodedString(),
            fileKeyBox: FileKeyBox(nonce: Data(keyNonce).base64EncodedString(), ciphertext: Data(box).base64EncodedString())
        )
    }

    /// Opens a downloaded blob with the key from the pointer (verify the message first:
    /// `MessageCrypto.open`).
    public static func open(
        _ ciphertext: [UInt8], pointer: AttachmentPointer, recipient: WhisperKeys, sender: PeerKeys
    ) throws(MessageCryptoError) -> [UInt8] {
        guard Int64(ciphertext.count) == pointer.ciphertextSize,
              let keyNonce = Data(base64Encoded: pointer.fileKeyBox.nonce), let boxed = Data(base64Encoded: pointer.fileKeyBox.ciphertext),
              let fileNonce = Data(base64Encoded: pointer.fileNonce),
              let key = X25519Box.open([UInt8](boxed), nonce: [UInt8](keyNonce), senderPublicKey: sender.encPublicKey, recipientPrivateKey: recipient.encPrivateKey),
              let file = SecretBox.open(ciphertext, nonce: [UInt8](fileNonce), key: key) else {
            throw .cannotDecrypt
        }
        return file
    }
}
