import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing
import WhisperClient
import WhisperShared

/// The encrypted contacts backup (docs/protocol.md section 12, "Contacts backup") through auth's public port.
@Suite struct ContactsBackupTests {
    static func call(_ method: HTTPMethod, _ stack: MessagingStack, token: String?, body: [String: Any]? = nil) async throws -> (status: Int, json: [String: Any]) {
        var request = HTTPClientRequest(url: "\(stack.auth.baseURL)/backup/contacts")
        request.method = method
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let body { request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: body))) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        let bytes = try await response.body.collect(upTo: 4 << 20)
        return (Int(response.status.code), (try? JSONSerialization.jsonObject(with: Data(buffer: bytes))) as? [String: Any] ?? [:])
    }

    static func device(_ stack: MessagingStack, mnemonic: String) async throws -> (whisperId: String, token: String, keys: WhisperKeys) {
        let keys = try WhisperKeys(mnemonic: mnemonic)
        let connection = WhisperConnection(url: "ws://127.0.0.1:\(stack.gateways[0].port)/ws", logger: TestServers.logger)
        try await connection.connect()
        let ack = try await connection.register(keys: keys, deviceId: RandomID.uuid(), platform: .ios, pushToken: nil, voipToken: nil)
        await connection.close()
        return (ack.whisperId, ack.sessionToken, keys)
    }

    @Test func aBackupFromOneDeviceOpensOnADeviceRestoredFromThePhraseAndNobodyElseReadsIt() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let mnemonic = BIP39.generateMnemonic()
            let first = try await Self.device(stack, mnemonic: mnemonic)
            let backup = ContactsBackup(contacts: [
                .init(whisperId: "WSP-AB3D-EF4G-HJKE", addedAt: 1_767_268_800_000, displayName: "Ana", isPinned: true),
                .init(whisperId: "WSP-MN6P-QR7S-TVTG", addedAt: 1_767_268_900_000, notes: "from work", isBlocked: true),
            ])
            #expect(try await Self.call(.GET, stack, token: first.token).status == 404)
            let stored = try await Self.call(.PUT, stack, token: first.token, body: try backup.sealed(with: first.keys))
            #expect(stored.status == 200 && stored.json["success"] as? Bool == true)
            #expect((stored.json["updatedAt"] as? Int64 ?? 0) > 0 || (stored.json["updatedAt"] as? Int ?? 0) > 0)

            // A new device, the phrase alone: the same identity, and the list back.
            let second = try await Self.device(stack, mnemonic: mnemonic)
            #expect(second.whisperId == first.whisperId)
            let fetched = try await Self.call(.GET, stack, token: second.token)
            #expect(fetched.status == 200)
            let opened = try ContactsBackup.open(
                nonce: try #require(fetched.json["nonce"] as? String), ciphertext: try #require(fetched.json["ciphertext"] as? String), with: second.keys
            )
            #expect(opened == backup)

            // Another identity reads only its own (none), and cannot open this one.
            let other = try await Self.device(stack, mnemonic: BIP39.generateMnemonic())
            #expect(try await Self.call(.GET, stack, token: other.token).status == 404)
            #expect(throws: MessageCryptoError.self) {
                _ = try ContactsBackup.open(nonce: fetched.json["nonce"] as? String ?? "", ciphertext: fetched.json["ciphertext"] as? String ?? "", with: other.keys)
            }
            #expect(try await Self.call(.DELETE, stack, token: other.token).status == 200)
            #expect(try await Self.call(.GET, stack, token: second.token).status == 200)
            #expect(try await Self.call(.GET, stack, token: nil).status == 401)

            // Refused: a wrong nonce, too large, unknown fields; then the owner deletes it.
            var bad = try backup.sealed(with: second.keys)
            bad["nonce"] = Data(count: 12).base64EncodedString()
            #expect(try await Self.call(.PUT, stack, token: second.token, body: bad).status == 400)
            var huge = try backup.sealed(with: second.keys)
            huge["ciphertext"] = Data(count: 1_048_577).base64EncodedString()
            #expect(try await Self.call(.PUT, stack, token: second.token, body: huge).status == 400)
            var extra = try backup.sealed(with: second.keys)
            extra["owner"] = other.whisperId
            #expect(try await Self.call(.PUT, stack, token: second.token, body: extra).status == 400)
            #expect(try await Self.call(.DELETE, stack, token: second.token).status == 200)
            #expect(try await Self.call(.GET, stack, token: second.token).status == 404)
        }
    }

    /// Item 8 of issue 34: a blob that names a crypto version the backup format does not
    /// have is refused, and the one stored before stays as it was.
    @Test func aBackupNamingAnotherCryptoVersionIsRefusedAndTheStoredOneKept() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let device = try await Self.device(stack, mnemonic: BIP39.generateMnemonic())
            let backup = ContactsBackup(contacts: [.init(whisperId: "WSP-AB3D-EF4G-HJKE", addedAt: 1_767_268_800_000)])
            let sealed = try backup.sealed(with: device.keys)
            #expect(try await Self.call(.PUT, stack, token: device.token, body: sealed).status == 200)
            for version in [0, 2, 3] {
                var other = try backup.sealed(with: device.keys)
                other["cryptoVersion"] = version
                let refused = try await Self.call(.PUT, stack, token: device.token, body: other)
                #expect(refused.status == 400)
                #expect((refused.json["error"] as? [String: Any])?["code"] as? String == "INVALID_PAYLOAD")
            }
            let fetched = try await Self.call(.GET, stack, token: device.token)
            #expect(fetched.json["nonce"] as? String == sealed["nonce"] as? String)
            #expect(fetched.json["ciphertext"] as? String == sealed["ciphertext"] as? String)
        }
    }
}
