import Foundation

/// A third-party auditor's word on a head it verified (docs/key-transparency.md,
/// "Third-party auditing"): that it checked every epoch up to `epoch`, whose log root is
/// `logRoot`, and found each one as the rules say. An auditor holds its own Ed25519 key,
/// which the operator never holds; auth keeps each configured auditor's newest signature
/// and serves them beside the head.
public struct AuditorSignature: Codable, Sendable, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable {
        case auditorKeyId, epoch, logRoot, signedAt, signature
    }
    /// The JSON object's keys, every one required.
    public static let fieldNames = Set(CodingKeys.allCases.map(\.rawValue))

    /// The auditor's key ID (``Ed25519/keyId(_:)`` of its public key).
    public var auditorKeyId: String
    public var epoch: Int64
    /// The audited head's `logRoot`, base64 (it commits to every epoch up to `epoch`).
    public var logRoot: String
    /// When the auditor signed (ms since 1970).
    public var signedAt: Int64
    /// Ed25519 over ``signedBytes(epoch:logRoot:signedAt:)``, base64.
    public var signature: String

    public init(auditorKeyId: String, epoch: Int64, logRoot: String, signedAt: Int64, signature: String) {
        self.auditorKeyId = auditorKeyId
        self.epoch = epoch
        self.logRoot = logRoot
        self.signedAt = signedAt
        self.signature = signature
    }

    /// The auditor, with `key`, signs `head` at `signedAt`.
    public init(signing head: DirectoryHead, with key: Ed25519.KeyPair, at signedAt: Int64 = Clock.millisecondsNow()) {
        auditorKeyId = Ed25519.keyId(key.publicKey)
        epoch = head.epoch
        logRoot = head.logRoot
        self.signedAt = signedAt
        signature = Data(key.sign(Self.signedBytes(epoch: head.epoch, logRoot: head.logRootBytes ?? [], signedAt: signedAt))).base64EncodedString()
    }

    /// `"whisper-kt-audit-v1\n" ‖ epoch (8 bytes, big-endian) ‖ logRoot (32 bytes) ‖ signedAt (8 bytes, big-endian)`.
    public static func signedBytes(epoch: Int64, logRoot: [UInt8], signedAt: Int64) -> [UInt8] {
        Array("whisper-kt-audit-v1\n".utf8) + KeyDirectory.bigEndian(epoch) + logRoot + KeyDirectory.bigEndian(signedAt)
    }

    public var logRootBytes: [UInt8]? {
        guard let bytes = Data(base64Encoded: logRoot), bytes.count == 32 else { return nil }
        return Array(bytes)
    }

    /// Whether `publicKey` (an auditor's) made this signature: its key ID and the signature.
    public func isSigned(by publicKey: [UInt8]) -> Bool {
        guard auditorKeyId == Ed25519.keyId(publicKey), epoch > 0, let root = logRootBytes,
              let signature = Data(base64Encoded: signature), signature.count == 64 else { return false }
        return Ed25519.verify(signature: Array(signature), message: Self.signedBytes(epoch: epoch, logRoot: root, signedAt: signedAt), publicKey: publicKey)
    }

    /// Whether this is a signature of `head` (the same epoch and log root).
    public func isOf(_ head: DirectoryHead) -> Bool { epoch == head.epoch && logRootBytes != nil && logRootBytes == head.logRootBytes }
}

/// An auditor's signature as `GET /kt/head` serves it: with the directory's own signed head
/// of the audited epoch, so that a client can check the head is the directory's and on its
/// log (``AuditorSignature/isOf(_:)``) before it takes the auditor's word for it.
public struct AuditedHead: Codable, Sendable, Equatable {
    public var head: DirectoryHead
    public var audit: AuditorSignature

    public init(head: DirectoryHead, audit: AuditorSignature) {
        self.head = head
        self.audit = audit
    }
}
