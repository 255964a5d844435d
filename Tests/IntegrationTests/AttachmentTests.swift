import AsyncHTTPClient
import AttachmentSignerService
import Foundation
import NIOCore
import NIOHTTP1
import Testing
import WhisperClient
import WhisperShared

/// Presigned uploads and downloads against a real S3-compatible server (moto).
@Suite struct AttachmentTests {
    struct Signer: StartedForATest {
        let stack: MessagingStack
        let moto: MotoProcess
        let store: S3Client
        let service: RunningService

        func stop() async throws {
            try await service.stop()
            try await stack.stop()
            moto.stop()
        }
    }

    static func start(_ adjust: (inout AttachmentSignerSettings) -> Void = { _ in }) async throws -> Signer {
        let moto = try MotoProcess()
        let store = try await moto.client()
        return try await MessagingStack.start(routers: 1).then { stack in
            var settings = AttachmentSignerSettings(
                common: TestServers.common(service: "attachment-signer", postgres: stack.database, redis: stack.redis), s3: moto.settings
            )
            adjust(&settings)
            let final = settings
            let service = try await RunningService.start { running in
                buildAttachmentSigner(settings: final, logger: TestServers.logger, onServerRunning: running).assembly
            }
            return try await service.then { service in
                _ = try await HTTP.waitFor("\(service.baseURL)/ready") { $0.status == 200 }
                return Signer(stack: stack, moto: moto, store: store, service: service)
            }
        }
    }

    static func call(_ method: HTTPMethod, _ url: String, token: String?, body: [String: Any]? = nil) async throws -> (status: Int, json: [String: Any]) {
        try await HTTP.json(method, url, token: token, body: body)
    }

    static func transfer(_ method: HTTPMethod, _ url: String, body: [UInt8]? = nil, headers: [String: String] = [:]) async throws -> (status: Int, body: [UInt8]) {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 64 << 20)
        return (Int(response.status.code), Array(bytes.readableBytesView))
    }

    static func presign(_ signer: Signer, _ user: TestUser, contentType: String = "image/jpeg", size: Int, purpose: String = "message_attachment") async throws -> (status: Int, json: [String: Any]) {
        try await call(.POST, "\(signer.service.baseURL)/attachments/presign", token: user.token, body: [
            "contentType": contentType, "sizeBytes": size, "purpose": purpose,
        ])
    }

    static func download(_ signer: Signer, _ objectKey: String, as user: TestUser) async throws -> (status: Int, json: [String: Any]) {
        try await call(.GET, "\(signer.service.baseURL)/attachments/\(objectKey)/download", token: user.token)
    }

    @Test func anUploadThroughThePresignedURLComesBackThroughTheDownloadURL() async throws {
        try await Self.start().running { signer in
            let alice = try await signer.stack.user(on: 0)
            let mallory = try await signer.stack.user(on: 1)
            let blob = SecureBytes.random(4_096)

            let presigned = try await Self.presign(signer, alice, size: blob.count)
            #expect(presigned.status == 200)
            let uploadURL = try #require(presigned.json["uploadUrl"] as? String)
            let objectKey = try #require(presigned.json["objectKey"] as? String)
            let headers = try #require(presigned.json["headers"] as? [String: String])
            #expect(Format.isObjectKey(objectKey))
            #expect(headers == ["Content-Length": "4096", "Content-Type": "application/octet-stream"])
            // The URL signs the length and the type with the host.
            let query = try #require(URLComponents(string: uploadURL)?.queryItems)
            #expect(query.first { $0.name == "X-Amz-SignedHeaders" }?.value == "content-length;content-type;host")
            #expect(query.first { $0.name == "X-Amz-Expires" }?.value == "900")

            // Not uploaded yet: nothing to hand out.
            #expect(try await Self.download(signer, objectKey, as: alice).status == 404)
            let put = try await Self.transfer(.PUT, uploadURL, body: blob, headers: headers)
            #expect(put.status == 200)

            let granted = try await Self.download(signer, objectKey, as: alice)
            #expect(granted.status == 200)
            let downloadURL = try #require(granted.json["downloadUrl"] as? String)
            let fetched = try await Self.transfer(.GET, downloadURL)
            #expect(fetched.status == 200 && fetched.body == blob)

            // Sent to bob in a message: bob may fetch it, and the SDK opens it.
            let bob = try await signer.stack.user(on: 1)
            let photo = Array("a photo's bytes".utf8) + SecureBytes.random(2_000)
            let sealed = AttachmentCrypto.seal(photo)
            let second = try await Self.presign(signer, alice, size: sealed.ciphertext.count)
            let photoKey = try #require(second.json["objectKey"] as? String)
            let photoURL = try #require(second.json["uploadUrl"] as? String)
            #expect(try await Self.transfer(.PUT, photoURL, body: sealed.ciphertext, headers: try #require(second.json["headers"] as? [String: String])).status == 200)
            #expect(try await Self.download(signer, photoKey, as: bob).status == 404)
            var message = alice.message("look", to: bob)
            message.msgType = .image
            message.attachment = AttachmentCrypto.pointer(to: sealed, objectKey: photoKey, contentType: "image/jpeg", from: alice.keys, to: bob.peerKeys)
            try await alice.connection.send(message)
            let received = try #require(try await bob.events(.messageReceived).first?.payload(as: MessageReceived.self))
            let pointer = try #require(received.attachment)
            let forBob = try await Self.download(signer, pointer.objectKey, as: bob)
            #expect(forBob.status == 200)
            let bobsCopy = try await Self.transfer(.GET, try #require(forBob.json["downloadUrl"] as? String))
            #expect(try AttachmentCrypto.open(bobsCopy.body, pointer: pointer, recipient: bob.keys, sender: alice.peerKeys) == photo)

            // Someone it was never sent to learns nothing.
            let refused = try await Self.download(signer, objectKey, as: mallory)
            #expect(refused.status == 404)
            #expect(try await Self.download(signer, photoKey, as: mallory).status == 404)
            #expect((refused.json["error"] as? [String: Any])?["code"] as? String == "NOT_FOUND")
            #expect(try await Self.call(.GET, "\(signer.service.baseURL)/attachments/\(objectKey)/download", token: nil).status == 401)
        }
    }

    /// moto, like some S3-compatible stores, does not hold uploads to the presigned
    /// signature: an object of another size is never handed out, and is marked for GC.
    @Test func anObjectThatDiffersFromItsDeclarationIsNeverServed() async throws {
        try await Self.start().running { signer in
            let alice = try await signer.stack.user(on: 0)
            let presigned = try await Self.presign(signer, alice, size: 1_000)
            let objectKey = try #require(presigned.json["objectKey"] as? String)
            // Written behind the presigned URL's back, with another length and type.
            try await signer.store.put(objectKey, body: SecureBytes.random(5_000), contentType: "text/html")

            let refused = try await Self.download(signer, objectKey, as: alice)
            #expect(refused.status == 404)
            let rejected = try await signer.stack.withPostgres { postgres in
                try await postgres.query("SELECT rejected_at IS NOT NULL FROM attachments WHERE object_key = \(objectKey)")
                    .decode(Bool.self).first { _ in true }
            }
            #expect(rejected == true)
            // Still refused after a correct upload: a rejected object stays rejected.
            try await signer.store.put(objectKey, body: SecureBytes.random(1_000), contentType: "application/octet-stream")
            #expect(try await Self.download(signer, objectKey, as: alice).status == 404)
        }
    }

    @Test func presignRefusesOversizeWrongTypeAndUnknownPurpose() async throws {
        try await Self.start().running { signer in
            let alice = try await signer.stack.user(on: 0)
            let cases: [(String, Int, String)] = [
                ("image/jpeg", Limits.MAX_IMAGE_BYTES + 1, "message_attachment"),
                ("audio/ogg", Limits.MAX_VOICE_BYTES + 1, "message_attachment"),
                ("application/pdf", Limits.MAX_FILE_BYTES + 1, "message_attachment"),
                ("not a type", 10, "message_attachment"),
                ("image/jpeg", 0, "message_attachment"),
                ("image/jpeg", 10, "avatar-of-someone-else"),
            ]
            for (type, size, purpose) in cases {
                let reply = try await Self.presign(signer, alice, contentType: type, size: size, purpose: purpose)
                #expect(reply.status == 400, "\(type) \(size) \(purpose)")
                #expect((reply.json["error"] as? [String: Any])?["code"] as? String == "INVALID_PAYLOAD")
            }
            // Within the limits of each kind.
            #expect(try await Self.presign(signer, alice, contentType: "audio/ogg", size: Limits.MAX_VOICE_BYTES).status == 200)
            #expect(try await Self.presign(signer, alice, contentType: "application/pdf", size: Limits.MAX_FILE_BYTES).status == 200)
            let extra = try await Self.call(.POST, "\(signer.service.baseURL)/attachments/presign", token: alice.token, body: [
                "contentType": "image/jpeg", "sizeBytes": 10, "purpose": "message_attachment", "bucket": "other",
            ])
            #expect(extra.status == 400)
            let anonymous = try await Self.call(.POST, "\(signer.service.baseURL)/attachments/presign", token: nil, body: [:])
            #expect(anonymous.status == 401)
        }
    }

    /// Item 3 of issue 34: one identity's uploads are bounded in bytes, those not sent yet
    /// and all of them, each identity on its own.
    @Test func uploadsArePerIdentityQuotasOfUnsentAndLiveBytes() async throws {
        try await Self.start { $0.quotaUnsentBytes = 5_000; $0.quotaLiveBytes = 9_000 }.running { signer in
            let alice = try await signer.stack.user(on: 0)
            let carol = try await signer.stack.user(on: 0)
            let bob = try await signer.stack.offlineUser(on: 1)
            // Alice: one sent (3,016 bytes), then unsent ones up to 5,000 bytes.
            _ = try await GCTests.sendAttachment(signer, from: alice, to: [bob])
            #expect(try await Self.presign(signer, alice, size: 4_000).status == 200)
            let unsentFull = try await Self.presign(signer, alice, size: 2_000)
            #expect(unsentFull.status == 429)
            #expect((unsentFull.json["error"] as? [String: Any])?["code"] as? String == "RATE_LIMITED")
            #expect(((unsentFull.json["error"] as? [String: Any])?["message"] as? String)?.contains("not sent yet") == true)
            #expect(try await Self.presign(signer, alice, size: 1_000).status == 200)
            // Carol: her own quota; two sent (6,032 bytes), then the live bound (9,000).
            _ = try await GCTests.sendAttachment(signer, from: carol, to: [bob])
            _ = try await GCTests.sendAttachment(signer, from: carol, to: [bob])
            let liveFull = try await Self.presign(signer, carol, size: 3_000)
            #expect(liveFull.status == 429)
            #expect(((liveFull.json["error"] as? [String: Any])?["message"] as? String)?.contains("recipients") == true)
            #expect(try await Self.presign(signer, carol, size: 2_900).status == 200)
            let refusals = try await HTTP.get("\(signer.service.baseURL)/metrics").body
            #expect(Metrics.value(in: refusals, "whisper_attachment_quota_refusals_total") == 2)
        }
    }
}
