import Foundation
import Hummingbird
import Testing
import WhisperClient
import WhisperShared

/// The SDK's calls as docs/sdk.md shows them, against the eight services as processes:
/// the HTTP half (`WhisperAPI`), the outbox, reports, and what a refusal looks like.
@Suite struct SDKTests {
    struct Person {
        let whisperId: String
        let keys: WhisperKeys
        let connection: WhisperConnection
        let token: String
        var me: (whisperId: String, keys: WhisperKeys) { (whisperId, keys) }
    }

    static func person(_ endpoints: WhisperEndpoints) async throws -> Person {
        let keys = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
        let connection = WhisperConnection(url: endpoints.websocket, logger: TestServers.logger)
        try await connection.connect()
        let ack = try await connection.register(keys: keys, deviceId: RandomID.uuid(), platform: .ios)
        return Person(whisperId: ack.whisperId, keys: keys, connection: connection, token: ack.sessionToken)
    }

    @Test func theGuidesFlowsWorkThroughTheSDKAlone() async throws {
        let stack = try await ProcessStack.start()
        defer { stack.discard() }
        let endpoints = WhisperEndpoints(
            websocket: "ws://127.0.0.1:\(try stack.service("gateway").port)/ws", auth: try stack.service("auth").baseURL,
            attachments: try stack.service("attachment-signer").baseURL, turn: try stack.service("turn-cred").baseURL
        )
        let api = WhisperAPI(endpoints: endpoints)
        let alice = try await Self.person(endpoints), bob = try await Self.person(endpoints)

        // Key lookup: the keys bob registered; an unknown ID is the server's NOT_FOUND.
        let lookup = try await api.keys(of: bob.whisperId, sessionToken: alice.token)
        #expect(lookup.keys == bob.keys.peerKeys(whisperId: bob.whisperId))
        #expect(lookup.status == "active")
        let nobody = WhisperID.generate()
        await #expect(throws: WhisperAPIError.refused(status: 404, code: .notFound, message: "no such identity")) {
            _ = try await api.keys(of: nobody, sessionToken: alice.token)
        }
        await #expect(throws: WhisperAPIError.self) { _ = try await api.keys(of: bob.whisperId, sessionToken: "not-a-session") }

        // The outbox: queued, sent through the socket, delivered when bob's receipt comes.
        let outbox = SendQueue(store: MemoryOutboxStore())
        let message = MessageCrypto.makeMessage(Array("through the outbox".utf8), from: alice.me, to: lookup.keys, sessionToken: alice.token)
        try await outbox.enqueue(message)
        #expect(try await outbox.state(of: message.messageId) == .queued)
        try await outbox.flush { _ = try await alice.connection.send($0.message) }
        #expect(try await outbox.state(of: message.messageId) == .sent)
        let page = try await bob.connection.fetchPending()
        let received = try #require(page.messages.first { $0.messageId == message.messageId })
        let aliceKeys = try await api.keys(of: alice.whisperId, sessionToken: bob.token).keys
        #expect(try MessageCrypto.open(received, by: bob.me, sender: aliceKeys) == Array("through the outbox".utf8))
        try await bob.connection.acknowledge(received)
        var delivered: MessageDelivered?
        for await frame in alice.connection.events {
            if let receipt = frame.payload(as: MessageDelivered.self), receipt.messageId == message.messageId {
                delivered = receipt
                break
            }
        }
        let receipt = try #require(delivered)
        try await outbox.receipt(messageId: receipt.messageId, status: receipt.status)
        #expect(try await outbox.state(of: message.messageId) == .delivered)

        // An attachment: sealed, uploaded, sent as a pointer, fetched and opened by bob.
        let photo = SecureBytes.random(50_000)
        let sealed = AttachmentCrypto.seal(photo)
        let objectKey = try await api.upload(sealed, contentType: "image/jpeg", sessionToken: alice.token)
        let pointer = AttachmentCrypto.pointer(to: sealed, objectKey: objectKey, contentType: "image/jpeg", from: alice.keys, to: lookup.keys)
        let withPhoto = MessageCrypto.makeMessage(
            Array("photo".utf8), from: alice.me, to: lookup.keys, sessionToken: alice.token, msgType: .image, attachment: pointer
        )
        try await alice.connection.send(withPhoto)
        let photoMessage = try #require(try await bob.connection.fetchPending().messages.first { $0.messageId == withPhoto.messageId })
        _ = try MessageCrypto.open(photoMessage, by: bob.me, sender: aliceKeys)
        let attachment = try #require(photoMessage.attachment)
        #expect(try await api.fetchAttachment(attachment, recipient: bob.keys, sender: aliceKeys, sessionToken: bob.token) == photo)
        // Nobody else gets it: the server's 404.
        await #expect(throws: WhisperAPIError.refused(status: 404, code: .notFound, message: "no such attachment")) {
            _ = try await api.downloadURL(objectKey: objectKey, sessionToken: (try await Self.person(endpoints)).token)
        }

        // The contacts backup: pushed, pulled and opened with the phrase's key, deleted.
        #expect(try await api.pullContactsBackup(keys: alice.keys, sessionToken: alice.token) == nil)
        let list = ContactsBackup(contacts: [.init(whisperId: bob.whisperId, addedAt: 1_767_000_000_000, displayName: "Bob")])
        let updatedAt = try await api.pushContactsBackup(list, keys: alice.keys, sessionToken: alice.token)
        let pulled = try #require(try await api.pullContactsBackup(keys: alice.keys, sessionToken: alice.token))
        #expect(pulled.backup == list)
        #expect(pulled.updatedAt == updatedAt)
        await #expect(throws: MessageCryptoError.cannotDecrypt) {
            _ = try await api.pullContactsBackup(keys: bob.keys, sessionToken: alice.token)
        }
        try await api.deleteContactsBackup(sessionToken: alice.token)
        #expect(try await api.pullContactsBackup(keys: alice.keys, sessionToken: alice.token) == nil)

        // TURN credentials, over HTTP and over the socket: coturn's REST scheme for alice.
        let overHTTP = try await api.turnCredentials(sessionToken: alice.token)
        let overSocket = try await alice.connection.turnCredentials()
        for credentials in [overHTTP, overSocket] {
            #expect(credentials.username.hasSuffix(":\(alice.whisperId)"))
            #expect(credentials.urls == ["turn:127.0.0.1:3478?transport=udp"])
            #expect(credentials.expiresAt > Clock.millisecondsNow())
        }

        // A report, and its repeat naming the same report.
        let report = try await bob.connection.report(alice.whisperId, reason: .spam, messageIds: [message.messageId])
        let again = try await bob.connection.report(alice.whisperId, reason: .spam, messageIds: [withPhoto.messageId])
        #expect(report.reportId == again.reportId)
        await #expect(throws: WhisperClientError.self) { _ = try await bob.connection.report(bob.whisperId, reason: .spam) }

        await alice.connection.close()
        await bob.connection.close()
    }

    @Test func endpointsForAnEdgeAndForScriptsUp() {
        #expect(WhisperEndpoints.edge("https://chat.example.org/") == WhisperEndpoints(
            websocket: "wss://chat.example.org/ws", auth: "https://chat.example.org", attachments: "https://chat.example.org",
            turn: "https://chat.example.org"
        ))
        #expect(WhisperEndpoints.edge("http://127.0.0.1:8088")?.websocket == "ws://127.0.0.1:8088/ws")
        #expect(WhisperEndpoints.edge("chat.example.org") == nil)
        #expect(WhisperEndpoints.local().auth == "http://127.0.0.1:8081")
        #expect(WhisperEndpoints.local().websocket == "ws://127.0.0.1:8080/ws")
    }
}

/// The SDK against a server that misbehaves: it must fail with an error an app can act
/// on, never allocate without bound or accept what it cannot check.
@Suite struct SDKHostileServerTests {
    @Test func oversizedWrongAndMalformedAnswersAreErrorsNotAllocations() async throws {
        let keys = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
        let someone = WhisperID.generate(), impostor = WhisperID.generate()
        let router = Router()
        // A key lookup answered with 8 MiB of JSON-looking bytes.
        router.get("/users/\(someone)/keys") { _, _ -> Response in
            let huge = "{\"whisperId\":\"" + String(repeating: "A", count: 8 << 20) + "\"}"
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: huge)))
        }
        // A key lookup answered with another identity's keys.
        router.get("/users/\(impostor)/keys") { _, _ -> Response in
            let body = "{\"whisperId\":\"\(someone)\",\"encPublicKey\":\"\(Data(keys.encPublicKey).base64EncodedString())\",\"signPublicKey\":\"\(Data(keys.signPublicKey).base64EncodedString())\",\"status\":\"active\"}"
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: body)))
        }
        // A backup that is not base64, and a refusal with a code.
        router.get("/backup/contacts") { _, _ -> Response in
            Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "{\"nonce\":\"%%%\",\"ciphertext\":\"!!\",\"updatedAt\":1}")))
        }
        router.post("/v1/turn/credentials") { _, _ -> Response in
            Response(status: .tooManyRequests, headers: [.contentType: "application/json", .retryAfter: "7"],
                     body: .init(byteBuffer: ByteBuffer(string: "{\"error\":{\"code\":\"RATE_LIMITED\",\"message\":\"slow down\"}}")))
        }
        router.post("/attachments/presign") { _, _ -> Response in
            Response(status: .forbidden, headers: [.contentType: "application/json"],
                     body: .init(byteBuffer: ByteBuffer(string: "{\"error\":{\"code\":\"USER_BANNED\",\"message\":\"banned\"}}")))
        }
        try await RunningService.serving(router).running { server in
            let base = server.baseURL
            let api = WhisperAPI(
                endpoints: WhisperEndpoints(websocket: "ws://unused/ws", auth: base, attachments: base, turn: base),
                directory: DirectoryView(keys: TestServers.directorySigner.publicKeys)
            )

            await #expect(throws: WhisperAPIError.unreadableResponse("/users/\(someone)/keys: body over 65536 bytes")) {
                _ = try await api.keys(of: someone, sessionToken: "t")
            }
            await #expect(throws: WhisperAPIError.unreadableResponse("key lookup answer for another identity or with malformed keys")) {
                _ = try await api.keys(of: impostor, sessionToken: "t")
            }
            await #expect(throws: MessageCryptoError.cannotDecrypt) { _ = try await api.pullContactsBackup(keys: keys, sessionToken: "t") }
            await #expect(throws: WhisperAPIError.retryLater(status: 429, retryAfterSeconds: 7)) { _ = try await api.turnCredentials(sessionToken: "t") }
            await #expect(throws: WhisperAPIError.refused(status: 403, code: .userBanned, message: "banned")) {
                _ = try await api.upload(AttachmentCrypto.seal([1, 2, 3]), contentType: "image/png", sessionToken: "t")
            }
        }
    }
}
