import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import WhisperProtocol

/// Where a deployment's client-facing parts answer: the WebSocket and the HTTP services
/// (auth, attachment-signer, turn-cred). Behind one edge proxy they share an origin
/// (``edge(_:)``); `scripts/up` gives each its own loopback port (``local(host:)``).
public struct WhisperEndpoints: Codable, Sendable, Equatable {
    /// The WebSocket URL (`ws://…/ws` or `wss://…/ws`).
    public var websocket: String
    /// The base URL of auth (`GET /users/{id}/keys`, `/backup/contacts`).
    public var auth: String
    /// The base URL of attachment-signer (`/attachments/…`).
    public var attachments: String
    /// The base URL of turn-cred (`POST /v1/turn/credentials`).
    public var turn: String

    public init(websocket: String, auth: String, attachments: String, turn: String) {
        self.websocket = websocket
        self.auth = auth
        self.attachments = attachments
        self.turn = turn
    }

    /// Everything behind one origin: `https://chat.example.org` gives
    /// `wss://chat.example.org/ws` and the HTTP paths on that origin. Nil when `base`
    /// is not an `http://` or `https://` URL.
    public static func edge(_ base: String) -> WhisperEndpoints? {
        let trimmed = base.hasSuffix("/") ? String(base.dropLast()) : base
        let websocket: String
        if trimmed.hasPrefix("https://") {
            websocket = "wss://" + trimmed.dropFirst("https://".count) + "/ws"
        } else if trimmed.hasPrefix("http://") {
            websocket = "ws://" + trimmed.dropFirst("http://".count) + "/ws"
        } else {
            return nil
        }
        return WhisperEndpoints(websocket: websocket, auth: trimmed, attachments: trimmed, turn: trimmed)
    }

    /// The ports `scripts/up` gives the services: gateway 8080, auth 8081,
    /// attachment-signer 8084, turn-cred 8085.
    public static func local(host: String = "127.0.0.1") -> WhisperEndpoints {
        WhisperEndpoints(
            websocket: "ws://\(host):8080/ws", auth: "http://\(host):8081", attachments: "http://\(host):8084", turn: "http://\(host):8085"
        )
    }
}

/// Why an HTTP call of ``WhisperAPI`` failed.
public enum WhisperAPIError: Error, Equatable, Sendable {
    /// The server answered with an error (docs/protocol.md section 12): its status, and
    /// its frozen code when the body named one.
    case refused(status: Int, code: ErrorCode?, message: String)
    /// A success status with a body this SDK cannot read (or one over its size bound).
    case unreadableResponse(String)
    /// The object store refused an upload or download (its status).
    case storage(status: Int)
    /// 429 (over a limit) or 503 (the service is draining or a dependency is down): try
    /// again after `retryAfterSeconds` (the `Retry-After`, when one came).
    case retryLater(status: Int, retryAfterSeconds: Int?)
}

/// What `POST /attachments/presign` returns: where to upload, with which headers.
public struct PresignedUpload: Codable, Sendable, Equatable {
    /// `PUT` the ciphertext here, with exactly `headers`, before `expiresAt`.
    public var uploadUrl: String
    /// The object's name, for the message's `attachment` pointer.
    public var objectKey: String
    /// When the URL stops working (ms since 1970).
    public var expiresAt: Int64
    /// The headers the URL's signature covers (length and type).
    public var headers: [String: String]
}

/// A peer's keys as `GET /users/{id}/keys` returns them, with the identity's standing,
/// checked against the key directory.
public struct KeyLookup: Sendable, Equatable {
    public var keys: PeerKeys
    /// `active` or `banned` (a banned identity's messages are refused).
    public var status: String
    /// The directory head the keys were proven in (now held by the ``DirectoryView``).
    public var head: DirectoryHead
}

/// The HTTP half of the client (key lookup, contacts backup, attachments, TURN), with a
/// ``WhisperConnection``'s session token; every response is bounded by what its endpoint
/// can legitimately send.
public struct WhisperAPI: Sendable {
    public let endpoints: WhisperEndpoints
    /// The key directory as this client holds it: every key lookup is checked against it.
    public let directory: DirectoryView
    /// How long a lookup of an identity not yet in the directory (registered since the
    /// last epoch) waits for it before ``KeyTransparencyError/notYetPublished``.
    public var directoryWait: Duration = .seconds(10)
    private let http: HTTPClient
    private let timeout: TimeAmount

    /// `http` defaults to AsyncHTTPClient's shared client; `directory`, to one that takes
    /// the directory's keys from the server at first use.
    public init(endpoints: WhisperEndpoints, http: HTTPClient = .shared, timeout: Duration = .seconds(30), directory: DirectoryView = DirectoryView()) {
        self.endpoints = endpoints
        self.http = http
        self.timeout = .nanoseconds(timeout.nanoseconds)
        self.directory = directory
    }

    // MARK: - Keys

    /// A peer's public keys (`GET /users/{whisperId}/keys`), proven by the key directory
    /// (docs/key-transparency.md): throws a ``KeyTransparencyError`` when the proof fails
    /// or the head does not extend the one ``directory`` holds. An identity registered
    /// since the last epoch is waited for (up to ``directoryWait``). Check a typed ID
    /// first with `WhisperID.isValid` (its checksum): the server answers 400 for a
    /// malformed one.
    public func keys(of whisperId: String, sessionToken: String) async throws -> KeyLookup {
        struct Body: Decodable {
            var whisperId: String; var encPublicKey: String; var signPublicKey: String; var status: String
            var proof: KeyProof?
        }
        var keys = try await directoryKeys()
        let deadline = ContinuousClock.now + directoryWait
        var pause = Duration.milliseconds(200)
        while true {
            let base = await directory.head
            let since = base.map { "?since=\($0.epoch)" } ?? ""
            let body: Body = try await call(.GET, endpoints.auth, "/users/\(whisperId)/keys\(since)", token: sessionToken, limit: 65_536)
            guard body.whisperId == whisperId,
                  let enc = Data(base64Encoded: body.encPublicKey), enc.count == 32,
                  let sign = Data(base64Encoded: body.signPublicKey), sign.count == 32 else {
                throw WhisperAPIError.unreadableResponse("key lookup answer for another identity or with malformed keys")
            }
            guard let proof = body.proof else {
                guard ContinuousClock.now + pause < deadline else { throw KeyTransparencyError.notYetPublished }
                try await Task.sleep(for: pause)
                pause = min(pause * 2, .seconds(2))
                continue
            }
            let peer = PeerKeys(whisperId: whisperId, encPublicKey: [UInt8](enc), signPublicKey: [UInt8](sign))
            if await directory.wantsKeys(for: proof.head.keyId) {
                // A head signed by a key not held yet (the directory may have rotated), or
                // keys last read long ago (one may have retired).
                keys = await directory.learn(try await servedDirectoryKeys()) ?? keys
            }
            let (head, moved) = try await directory.accept(
                proof, whisperId: whisperId, state: .active(encPublicKey: peer.encPublicKey, signPublicKey: peer.signPublicKey), keys: keys, base: base
            )
            if moved {
                // Another lookup moved the held head on while this one was answered: this
                // head must lie on the same log (a rollback or fork is refused there).
                try await directory.compare(with: head, keys: keys) { try await newestHead(since: $0) }
            }
            try await requireAudit(of: head)
            return KeyLookup(keys: peer, status: body.status, head: head)
        }
    }

    /// Checks the owner's own entry: looks `whisperId` up like any peer and throws
    /// ``KeyTransparencyError/keysNotMine`` when the directory holds keys other than
    /// `keys` (someone was given keys the owner did not register). Run it on connect and
    /// periodically (``monitorOwnEntry(whisperId:keys:sessionToken:every:)``).
    @discardableResult
    public func checkOwnEntry(whisperId: String, keys: WhisperKeys, sessionToken: String) async throws -> DirectoryHead {
        let lookup: KeyLookup
        do {
            lookup = try await self.keys(of: whisperId, sessionToken: sessionToken)
        } catch KeyTransparencyError.badInclusionProof {
            // The proof holds for other keys than those served: the entry is not ours.
            throw KeyTransparencyError.keysNotMine
        } catch KeyTransparencyError.peerKeysChanged {
            // Other keys than those proven for it before: not ours either.
            throw KeyTransparencyError.keysNotMine
        }
        guard lookup.keys.encPublicKey == keys.encPublicKey, lookup.keys.signPublicKey == keys.signPublicKey else {
            throw KeyTransparencyError.keysNotMine
        }
        return lookup.head
    }

    /// The directory's public keys: the ones ``directory`` holds, else `GET /kt/keys`.
    public func directoryKeys() async throws -> DirectoryKeys {
        try await directory.directoryKeys { try await servedDirectoryKeys() }
    }

    /// `GET /kt/keys`, as the server answers it (checked by ``DirectoryView`` before use).
    func servedDirectoryKeys() async throws -> DirectoryKeys {
        try await call(.GET, endpoints.auth, "/kt/keys", token: nil, limit: 16_384)
    }

    /// The directory's newest head, with the log's consistency proof from epoch `since`
    /// (`GET /kt/head`).
    public func newestHead(since: Int64?) async throws -> (DirectoryHead, KeyProof.Consistency?) {
        struct Body: Decodable { var head: DirectoryHead; var consistency: KeyProof.Consistency? }
        let body: Body = try await call(.GET, endpoints.auth, "/kt/head" + (since.map { "?since=\($0)" } ?? ""), token: nil, limit: 65_536)
        return (body.head, body.consistency)
    }

    /// Checks a head someone else holds (a peer's) against this client's: both must be
    /// on the directory's one log (``DirectoryView/compare(with:keys:newest:)``). With
    /// `peer` (the head came with a message from them), a head not on this client's log
    /// is ``KeyTransparencyError/splitView(peer:)``; other refusals (a stale newest
    /// head) are thrown as they are.
    public func compareHead(_ other: DirectoryHead, from peer: String? = nil) async throws {
        do {
            var keys = try await directoryKeys()
            if await directory.wantsKeys(for: other.keyId) {
                // Signed by a key not held yet (a rotation the peer saw first).
                keys = await directory.learn(try await servedDirectoryKeys()) ?? keys
            }
            try await directory.compare(with: other, keys: keys) { try await newestHead(since: $0) }
        } catch let problem as KeyTransparencyError {
            guard let peer else { throw problem }
            switch problem {
            case .notAnExtension, .badHeadSignature, .rollback, .malformed: throw KeyTransparencyError.splitView(peer: peer)
            default: throw problem
            }
        }
    }

    /// The configured auditors' newest signatures, as `GET /kt/head` serves them beside the
    /// newest head (docs/key-transparency.md, "Third-party auditing").
    public func audits() async throws -> (head: DirectoryHead, audits: [AuditedHead]) {
        struct Body: Decodable { var head: DirectoryHead; var audits: [AuditedHead]? }
        let body: Body = try await call(.GET, endpoints.auth, "/kt/head", token: nil, limit: 65_536)
        return (body.head, body.audits ?? [])
    }

    /// With auditor keys configured (``DirectoryView/auditorKeys``): requires that one of
    /// those auditors signed a head on this client's log published at most
    /// ``DirectoryView/maxAuditLag`` before `head`, reading the auditors' newest signatures
    /// (`GET /kt/head`) when the last one taken is too old. Each must verify with its
    /// auditor's key and name a head the directory signed, which must be on this client's
    /// log (``compareHead(_:from:)``: a fork is `notAnExtension`, not a lack of audit);
    /// else ``KeyTransparencyError/notAudited``.
    func requireAudit(of head: DirectoryHead) async throws {
        guard await directory.needsAudit(of: head) else { return }
        for item in try await audits().audits {
            guard await directory.isByAnAuditor(item.audit), item.audit.isOf(item.head) else { continue }
            try await compareHead(item.head)
            await directory.recordAudited(item.head)
        }
        if await directory.needsAudit(of: head) { throw KeyTransparencyError.notAudited }
    }

    /// Delivers an auditor's signature of a head it verified (`POST /kt/audits`); returns
    /// whether the server kept it as the auditor's newest.
    @discardableResult
    public func submit(_ audit: AuditorSignature) async throws -> Bool {
        struct Answer: Decodable { var recorded: Bool }
        let answer: Answer = try await call(.POST, endpoints.auth, "/kt/audits", token: nil, body: audit, limit: 4_096)
        return answer.recorded
    }

    /// One epoch's head, changes and update proof (`GET /kt/epochs/{epoch}`), as an
    /// auditor reads them.
    public func epochUpdate(_ epoch: Int64) async throws -> EpochUpdate {
        try await call(.GET, endpoints.auth, "/kt/epochs/\(epoch)", token: nil, limit: 256 << 20)
    }

    // MARK: - Contacts backup (docs/protocol.md section 12)

    /// Seals `backup` with the phrase's `contactsKey` and stores it, replacing the last
    /// one. Returns the server's `updatedAt` (ms).
    @discardableResult
    public func pushContactsBackup(_ backup: ContactsBackup, keys: WhisperKeys, sessionToken: String) async throws -> Int64 {
        struct Stored: Decodable { var success: Bool; var updatedAt: Int64 }
        let sealed = try backup.seal(with: keys)
        let stored: Stored = try await call(.PUT, endpoints.auth, "/backup/contacts", token: sessionToken, body: sealed, limit: 4_096)
        return stored.updatedAt
    }

    /// The stored backup, opened with the phrase's `contactsKey`, and when it was stored;
    /// nil when there is none. `MessageCryptoError.cannotDecrypt` when it does not open
    /// with these keys.
    public func pullContactsBackup(keys: WhisperKeys, sessionToken: String) async throws -> (backup: ContactsBackup, updatedAt: Int64)? {
        struct Stored: Decodable { var nonce: String; var ciphertext: String; var updatedAt: Int64 }
        let stored: Stored
        do {
            stored = try await call(.GET, endpoints.auth, "/backup/contacts", token: sessionToken, limit: 2 * Limits.MAX_CONTACTS_BACKUP_BYTES)
        } catch WhisperAPIError.refused(404, _, _) {
            return nil
        }
        return (try ContactsBackup.open(nonce: stored.nonce, ciphertext: stored.ciphertext, with: keys), stored.updatedAt)
    }

    /// Deletes `whisperId` for good over HTTP (`POST /account/delete` on the gateway, the
    /// twin of `WhisperConnection.deleteAccount`), signed with `keys`: for an app with no
    /// socket open. Answers once the deletion is done.
    @discardableResult
    public func deleteAccount(whisperId: String, keys: WhisperKeys, sessionToken: String) async throws -> AccountDeleted {
        try await call(
            .POST, ListenerDevice.origin(ofWebSocket: endpoints.websocket), "/account/delete", token: sessionToken,
            body: keys.accountDeletion(whisperId: whisperId), limit: 4_096
        )
    }

    /// Removes the stored backup (succeeds when there was none).
    public func deleteContactsBackup(sessionToken: String) async throws {
        struct Deleted: Decodable { var success: Bool }
        let _: Deleted = try await call(.DELETE, endpoints.auth, "/backup/contacts", token: sessionToken, limit: 4_096)
    }

    // MARK: - Attachments (docs/protocol.md section 12)

    /// Asks for an upload URL for `sizeBytes` of ciphertext of a file of `contentType`.
    public func presign(contentType: String, sizeBytes: Int, sessionToken: String) async throws -> PresignedUpload {
        struct Request: Encodable { var contentType: String; var sizeBytes: Int; var purpose = "message_attachment" }
        return try await call(
            .POST, endpoints.attachments, "/attachments/presign", token: sessionToken,
            body: Request(contentType: contentType, sizeBytes: sizeBytes), limit: 16_384
        )
    }

    /// Presigns and uploads a sealed file (`AttachmentCrypto.seal`); returns its
    /// `objectKey`, for `AttachmentCrypto.pointer` (one pointer per recipient).
    public func upload(_ sealed: AttachmentCrypto.SealedFile, contentType: String, sessionToken: String) async throws -> String {
        let presigned = try await presign(contentType: contentType, sizeBytes: sealed.ciphertext.count, sessionToken: sessionToken)
        var request = HTTPClientRequest(url: presigned.uploadUrl)
        request.method = .PUT
        for (name, value) in presigned.headers { request.headers.replaceOrAdd(name: name, value: value) }
        request.body = .bytes(ByteBuffer(bytes: sealed.ciphertext))
        let response = try await http.execute(request, timeout: timeout)
        _ = try? await response.body.collect(upTo: 65_536)
        guard (200..<300).contains(response.status.code) else { throw WhisperAPIError.storage(status: Int(response.status.code)) }
        return presigned.objectKey
    }

    /// A short-lived download URL for an attachment this identity uploaded or was sent.
    public func downloadURL(objectKey: String, sessionToken: String) async throws -> String {
        struct Body: Decodable { var downloadUrl: String; var expiresAt: Int64 }
        let body: Body = try await call(.GET, endpoints.attachments, "/attachments/\(objectKey)/download", token: sessionToken, limit: 16_384)
        return body.downloadUrl
    }

    /// Downloads the ciphertext a pointer names (at most its declared size) and opens it:
    /// verify the message that carried the pointer first (`MessageCrypto.open`).
    public func fetchAttachment(
        _ pointer: AttachmentPointer, recipient: WhisperKeys, sender: PeerKeys, sessionToken: String
    ) async throws -> [UInt8] {
        guard pointer.ciphertextSize >= 1, pointer.ciphertextSize <= Int64(Limits.MAX_FILE_BYTES) else {
            throw MessageCryptoError.cannotDecrypt
        }
        let url = try await downloadURL(objectKey: pointer.objectKey, sessionToken: sessionToken)
        let response = try await http.execute(HTTPClientRequest(url: url), timeout: timeout)
        guard response.status == .ok else {
            _ = try? await response.body.collect(upTo: 65_536)
            throw WhisperAPIError.storage(status: Int(response.status.code))
        }
        let buffer = try await response.body.collect(upTo: Int(pointer.ciphertextSize))
        return try AttachmentCrypto.open(Array(buffer.readableBytesView), pointer: pointer, recipient: recipient, sender: sender)
    }

    // MARK: - TURN

    /// TURN credentials over HTTP (`POST /v1/turn/credentials`); the same as
    /// `WhisperConnection.turnCredentials()` over the socket.
    public func turnCredentials(sessionToken: String) async throws -> TurnCredentials {
        try await call(.POST, endpoints.turn, "/v1/turn/credentials", token: sessionToken, limit: 16_384)
    }

    // MARK: - Plumbing

    private struct Empty: Encodable {}

    private func call<Reply: Decodable>(
        _ method: HTTPMethod, _ base: String, _ path: String, token: String?, limit: Int
    ) async throws -> Reply {
        try await call(method, base, path, token: token, body: Optional<Empty>.none, limit: limit)
    }

    private func call<Body: Encodable, Reply: Decodable>(
        _ method: HTTPMethod, _ base: String, _ path: String, token: String?, body: Body?, limit: Int
    ) async throws -> Reply {
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        request.headers.add(name: "Accept", value: "application/json")
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: try JSONEncoder().encode(body)))
        } else if method == .POST || method == .PUT {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: "{}"))
        }
        let response = try await http.execute(request, timeout: timeout)
        let status = Int(response.status.code)
        guard (200..<300).contains(status) else {
            let text = try? await response.body.collect(upTo: 65_536)
            if status == 429 || status == 503 {
                throw WhisperAPIError.retryLater(status: status, retryAfterSeconds: response.headers.first(name: "Retry-After").flatMap { Int($0) })
            }
            throw Self.refusal(status: status, body: text.map { Data($0.readableBytesView) })
        }
        let buffer: ByteBuffer
        do {
            buffer = try await response.body.collect(upTo: limit)
        } catch {
            throw WhisperAPIError.unreadableResponse("\(path): body over \(limit) bytes")
        }
        do {
            return try JSONDecoder().decode(Reply.self, from: Data(buffer.readableBytesView))
        } catch {
            throw WhisperAPIError.unreadableResponse("\(path): \(error)")
        }
    }

    /// The `{"error": {"code", "message"}}` of a refusal.
    static func refusal(status: Int, body: Data?) -> WhisperAPIError {
        struct Envelope: Decodable { struct Inner: Decodable { var code: String; var message: String }; var error: Inner }
        guard let body, let envelope = try? JSONDecoder().decode(Envelope.self, from: body) else {
            return .refused(status: status, code: nil, message: "HTTP \(status)")
        }
        return .refused(status: status, code: ErrorCode(rawValue: envelope.error.code), message: envelope.error.message)
    }
}
