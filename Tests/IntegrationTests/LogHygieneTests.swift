import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing
import WhisperClient
import WhisperShared

/// Spec 13: logs never hold tokens, keys, plaintext or ciphertext. The eight services run
/// as operators run them (the real executables, at `debug`, their output in files), a
/// client goes through every feature, and then every line every service wrote is
/// searched for every secret and every piece of content of that flow.
@Suite struct LogHygieneTests {
    @Test func noTokenKeyNonceSignatureOrCiphertextOfAFullFlowIsLogged() async throws {
        let stack = try await ProcessStack.start(environment: ["WHISPER_LOG_LEVEL": "debug"])
        defer { stack.discard() }
        let services = stack.services
        let adminToken = stack.adminToken, turnSecret = stack.turnSecret, s3Secret = stack.s3Secret
        let gateway = try #require(services["gateway"]), auth = try #require(services["auth"])
        let signer = try #require(services["attachment-signer"]), admin = try #require(services["admin"])

        // The flow: two identities, a message and its receipt, a refresh, a key lookup, a
        // contacts backup, an attachment presign, a call with TURN credentials, a report,
        // refused frames with a stranger's token, and a ban.
        let mnemonics = (BIP39.generateMnemonic(), BIP39.generateMnemonic())
        let aliceKeys = try WhisperKeys(mnemonic: mnemonics.0), bobKeys = try WhisperKeys(mnemonic: mnemonics.1)
        func connect(_ keys: WhisperKeys) async throws -> (WhisperConnection, RegisterAck) {
            let connection = WhisperConnection(url: "ws://127.0.0.1:\(gateway.port)/ws", logger: TestServers.logger)
            try await connection.connect()
            let ack = try await connection.register(keys: keys, deviceId: RandomID.uuid(), platform: .ios, pushToken: "apns-\(RandomID.uuid())")
            return (connection, ack)
        }
        let (aliceConnection, aliceAck) = try await connect(aliceKeys)
        let (bobConnection, bobAck) = try await connect(bobKeys)
        let alice = TestUser(whisperId: aliceAck.whisperId, keys: aliceKeys, token: aliceAck.sessionToken, connection: aliceConnection, events: EventLog(aliceConnection))
        let bob = TestUser(whisperId: bobAck.whisperId, keys: bobKeys, token: bobAck.sessionToken, connection: bobConnection, events: EventLog(bobConnection))
        let plaintext = "the plaintext nobody may log \(RandomID.uuid())"
        let (sent, received) = try await alice.sendAndWaitForArrival(plaintext, to: bob)
        try await bob.connection.acknowledge(received)
        _ = try await alice.events(.messageDelivered)
        let refreshed = try await bob.connection.refreshSession()
        #expect(try await HTTP.json(.GET, "\(auth.baseURL)/users/\(bob.whisperId)/keys", token: alice.token).status == 200)

        let backup = try ContactsBackup(contacts: [.init(whisperId: bob.whisperId, addedAt: Clock.millisecondsNow(), displayName: "Bob")]).sealed(with: aliceKeys)
        #expect(try await HTTP.json(.PUT, "\(auth.baseURL)/backup/contacts", token: alice.token, body: backup).status == 200)
        let presign = try await HTTP.json(.POST, "\(signer.baseURL)/attachments/presign", token: alice.token, body: [
            "contentType": "image/jpeg", "sizeBytes": 4_096, "purpose": "message_attachment",
        ])
        #expect(presign.status == 200)
        let uploadURL = try #require(presign.json["uploadUrl"] as? String)
        let uploadSignature = try #require(URLComponents(string: uploadURL)?.queryItems?.first { $0.name == "X-Amz-Signature" }?.value)

        let callId = RandomID.uuid()
        let sdp = "v=0 o=- the offer nobody may log \(RandomID.uuid())"
        let offer = CallCrypto.make(CallInitiate.self, Array(sdp.utf8), callId: callId, from: (alice.whisperId, aliceKeys), to: bob.peerKeys, sessionToken: alice.token, media: .audio)
        _ = try await alice.connection.startCall(offer)
        let answer = CallCrypto.make(CallAnswer.self, Array("v=0 answer \(RandomID.uuid())".utf8), callId: callId, from: (bob.whisperId, bobKeys), to: alice.peerKeys, sessionToken: refreshed.sessionToken)
        try await bob.connection.signal(answer)
        _ = try await alice.events(.callAnswered)
        let turn = try await alice.connection.turnCredentials()
        let end = CallCrypto.make(CallEnd.self, [], callId: callId, from: (alice.whisperId, aliceKeys), to: bob.peerKeys, sessionToken: alice.token, reason: .hangup)
        try await alice.connection.signal(end)
        _ = try await bob.events(.callEnded)
        _ = try await alice.connection.request(ReportUser(sessionToken: alice.token, .init(whisperId: bob.whisperId, reason: .spam, details: "report text", messageId: sent.messageId)))
        let stranger = WhisperConnection(url: "ws://127.0.0.1:\(gateway.port)/ws", logger: TestServers.logger)
        try await stranger.connect()
        // Alice's token with its first character changed (a token may start with "x").
        let forged = (alice.token.first == "x" ? "y" : "x") + String(alice.token.dropFirst())
        await stranger.resume(whisperId: alice.whisperId, sessionToken: forged)
        await expectRefused(.notRegistered, "a forged token") { _ = try await stranger.refreshSession() }
        #expect(try await HTTP.json(.POST, "\(admin.baseURL)/admin/ban", token: adminToken, body: ["whisperId": bob.whisperId, "reason": "log test"]).status == 200)
        try await waitUntil { await bob.connection.closeCode != nil }

        await stack.stop()

        // Everything secret or content-bearing that passed through the services.
        func base64(_ bytes: [UInt8]) -> String { Data(bytes).base64EncodedString() }
        var secrets: [String: String] = [
            "alice's session token": alice.token, "bob's session token": bob.token, "bob's refreshed token": refreshed.sessionToken,
            "the admin token": adminToken, "the internal token": TestServers.internalToken, "the TURN secret": turnSecret,
            "the S3 secret key": s3Secret, "the TURN credential": turn.credential, "the upload URL's signature": uploadSignature,
            "the message's nonce": sent.nonce, "the message's ciphertext": sent.ciphertext, "the message's signature": sent.sig,
            "the plaintext": plaintext, "the call offer's ciphertext": offer.ciphertext, "the call offer's nonce": offer.nonce,
            "the call offer's signature": offer.sig, "the answer's ciphertext": answer.ciphertext, "the SDP": sdp,
            "the backup's nonce": backup["nonce"] as? String ?? "?", "the backup's ciphertext": backup["ciphertext"] as? String ?? "?",
            "alice's encryption public key": base64(aliceKeys.encPublicKey), "alice's signing public key": base64(aliceKeys.signPublicKey),
            "alice's encryption private key": base64(aliceKeys.encPrivateKey), "alice's contacts key": base64(aliceKeys.contactsKey),
            "bob's signing public key": base64(bobKeys.signPublicKey), "the report's details": "report text",
        ]
        // Consecutive words of the phrase: a single word can be an ordinary English word
        // in a log line ("service" is one of the 2,048), two in a row of a phrase are not.
        let words = mnemonics.0.split(separator: " ")
        for index in 0..<min(3, words.count - 1) {
            secrets["mnemonic words \(index) and \(index + 1)"] = "\(words[index]) \(words[index + 1])"
        }
        var lines = 0
        var debugLines = 0
        for service in services.values {
            let text = try String(contentsOf: service.log, encoding: .utf8)
            // JSON escapes `/` in some writers: search both spellings.
            let unescaped = text.replacingOccurrences(of: "\\/", with: "/")
            for line in text.split(separator: "\n") {
                lines += 1
                if line.contains(#""level":"debug""#) { debugLines += 1 }
            }
            for (what, value) in secrets where unescaped.contains(value) {
                // Which events hold it (their names only: the lines hold the secret).
                let events = unescaped.split(separator: "\n").filter { $0.contains(value) }.map { line in
                    ((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]).flatMap { $0["event"] as? String } ?? "(not JSON)"
                }
                Issue.record("\(service.name)'s log holds \(what), in \(events)")
            }
            #expect(text.contains("\"service\":\"\(service.name)\""), "\(service.name) wrote no log lines")
        }
        // The search had something to search: every service logged, at debug level too.
        #expect(lines > 50)
        #expect(debugLines > 0)
        let authLog = try String(contentsOf: try #require(services["auth"]).log, encoding: .utf8)
        #expect(authLog.contains("\"event\":\"registered\""))
        #expect(authLog.contains(alice.whisperId))

    }
}
