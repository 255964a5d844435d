import Crypto

/// The canonical signing bytes of docs/protocol.md section 11 and the signature over them.
public enum CanonicalSigning {
    /// The frames that are signed, by their `type`.
    public static let signedTypes: Set<String> = [
        "send_message", "group_send_message", "call_initiate", "call_answer", "call_ice_candidate", "call_end",
    ]

    /// `directoryHead`: the sender's key directory head, carried by a message (the one
    /// extension line, docs/protocol.md section 11); frames without one sign the seven lines.
    public static func bytes(
        messageType: String, messageId: String, from: String, toOrGroupId: String,
        timestamp: Int64, nonce: String, ciphertext: String, directoryHead: DirectoryHead? = nil
    ) -> [UInt8] {
        // Built in place: one allocation for a ciphertext of up to 64 KiB.
        let timestamp = String(timestamp)
        let fields = [messageType, messageId, from, toOrGroupId, timestamp, nonce, ciphertext]
        let head = directoryHead.map(headLine)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(3 + fields.reduce(0) { $0 + $1.utf8.count + 1 } + (head?.utf8.count ?? 0))
        bytes.append(contentsOf: "v1\n".utf8)
        for field in fields {
            bytes.append(contentsOf: field.utf8)
            bytes.append(UInt8(ascii: "\n"))
        }
        if let head { bytes.append(contentsOf: head.utf8) }
        return bytes
    }

    /// `"head:" epoch "," logRoot "," prefixRoot "," publishedAt "," keyId "," signature "\n"`,
    /// each as sent (numbers in decimal).
    static func headLine(_ head: DirectoryHead) -> String {
        "head:\(head.epoch),\(head.logRoot),\(head.prefixRoot),\(head.publishedAt),\(head.keyId),\(head.signature)\n"
    }

    /// What is signed: sig = Ed25519_Sign(SHA256(signed_bytes)).
    public static func digest(_ signedBytes: [UInt8]) -> [UInt8] {
        Array(SHA256.hash(data: signedBytes))
    }

    public static func sign(_ signedBytes: [UInt8], with keys: Ed25519.KeyPair) -> [UInt8] {
        keys.sign(digest(signedBytes))
    }

    public static func verify(_ signature: [UInt8], over signedBytes: [UInt8], publicKey: [UInt8]) -> Bool {
        Ed25519.verify(signature: signature, message: digest(signedBytes), publicKey: publicKey)
    }
}
