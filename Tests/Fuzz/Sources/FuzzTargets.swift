import Foundation
import WhisperMessaging
import WhisperShared

/// What the fuzzer drives: every decoder that reads bytes from outside a process.
/// Each target traps (the fuzzer's finding) only when the code under test broke a
/// promise: a second answer that differs from the first, a refusal with another code
/// than the contract's, a round trip that changes a value. A trap inside the code under
/// test (overflow, bad index, force unwrap) is a finding by itself.
enum FuzzTarget: String, CaseIterable {
    /// WebSocket frames: the gateway's decoder (fast and general paths), the router's
    /// reading of stored payloads, and the SDK's reading of server frames.
    case frames
    /// Replies from Redis through hiredis's reader.
    case resp
    /// Gateway commands and presence records from pub/sub and Redis keys.
    case commands
    /// Settings (environment variables) and the URLs and rules inside them.
    case settings
    /// Ed25519 signatures: the services' check against a prepared key gives libsodium's
    /// answer.
    case signatures

    func run(_ bytes: [UInt8]) {
        switch self {
        case .frames: Self.frames(bytes)
        case .resp: Self.resp(bytes)
        case .commands: Self.commands(bytes)
        case .settings: Self.settings(bytes)
        case .signatures: Self.signatures(bytes)
        }
    }

    static func frames(_ bytes: [UInt8]) {
        // The gateway: any refusal before business logic is INVALID_PAYLOAD.
        if case .failure(let rejection) = ClientFrameDecoder().decode(bytes) {
            expect(rejection.code == .invalidPayload, "the frame decoder refused with \(rejection.code.rawValue)")
            _ = ServerFrameCodec.encodeError(rejection.code, rejection.message, requestId: rejection.requestId)
        }
        if let difference = FastPathAudit.disagreement(clientFrame: bytes) {
            expect(false, "client frame: \(difference)")
        }
        if let difference = FastPathAudit.disagreement(serverFrame: bytes) {
            expect(false, "server frame: \(difference)")
        }
        // The router reads a stored payload with the fast reader, then the general one,
        // and checks it again.
        if let object = FastJSON.object(bytes) {
            if let message = SendMessage(fast: object) { _ = try? message.validate() }
            if let receipt = DeliveryReceipt(fast: object) { _ = try? receipt.validate() }
            if let received = MessageReceived(fast: object) { _ = received.payloadJSON }
        }
        let data = Data(bytes)
        if let message = try? ProtocolJSON.decoder.decode(SendMessage.self, from: data) {
            _ = try? message.validate()
            _ = Clock.isWithinSkew(message.timestamp, of: Clock.millisecondsNow())
        }
        if let request = try? ProtocolJSON.decoder.decode(FetchPending.self, from: data) { _ = try? request.validate() }
        // The SDK reading what a server sent.
        _ = try? ServerFrameCodec.decode(bytes)
    }

    static func resp(_ bytes: [UInt8]) {
        let reader = RESPReader()
        // In two pieces, as a socket may deliver it.
        let cut = bytes.isEmpty ? 0 : Int(bytes[0]) % (bytes.count + 1)
        do {
            try bytes[..<cut].withUnsafeBytes { try reader.feed($0) }
            while let value = try reader.next() { touch(value) }
            try bytes[cut...].withUnsafeBytes { try reader.feed($0) }
            while let value = try reader.next() { touch(value) }
        } catch {
            // A protocol error: the connection would be dropped and opened again.
        }
    }

    /// Reads a reply the ways the services do.
    static func touch(_ value: RESPValue) {
        _ = value.string
        _ = value.int
        _ = value.bytes
        guard let elements = value.array else { return }
        if let entry = RouterStream.Entry(fields: elements) { _ = entry.addCommand(in: StreamShards(4)) }
        for element in elements { touch(element) }
    }

    static func commands(_ bytes: [UInt8]) {
        if let command = GatewayCommand.decode(bytes) {
            let again = GatewayCommand.decode(command.encoded)
            expect(again == command, "a gateway command changed on its way through encode and decode")
        }
        let text = String(decoding: bytes, as: UTF8.self)
        _ = PresenceRecord(encoded: text)
        _ = RateLimitRule(text)
    }

    static func settings(_ bytes: [UInt8]) {
        var variables: [String: String] = [:]
        for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            variables[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        let reader = SettingsReader.environment(variables)
        _ = CommonSettings(service: "fuzz", defaultPort: 8080, from: reader)
        for key in variables.keys {
            let dotted = key.lowercased().replacingOccurrences(of: "_", with: ".")
            _ = reader.int(dotted, default: 1, range: 0...65_535)
            _ = reader.double(dotted, default: 1, range: 0...1)
            _ = reader.bool(dotted, default: false)
            _ = reader.list(dotted, default: [])
            let rule = reader.rateLimit(dotted, default: RateLimitRule(capacity: 1, period: .seconds(1)))
            var bucket = LocalBucket(full: rule)
            _ = bucket.take(rule)
        }
        for value in variables.values {
            _ = RedisConfiguration(url: value)
            _ = PostgresSettings(url: value)
            if let rule = RateLimitRule(value) {
                _ = rule.description
                _ = RateLimiter.arguments(rule)
            }
        }
        _ = try? reader.validate()
    }

    /// A mode byte, a key (or, odd mode, the seed of one whose real signature the next
    /// 64 bytes damage by XOR, zeros leaving it valid), a signature, then the message.
    static func signatures(_ bytes: [UInt8]) {
        guard bytes.count >= 97 else { return }
        var publicKey = Array(bytes[1..<33]), signature = Array(bytes[33..<97])
        let message = Array(bytes[97...])
        if bytes[0] & 1 == 1 {
            let pair = Ed25519.KeyPair(seed: publicKey)
            signature = zip(pair.sign(message), signature).map { $0 ^ $1 }
            publicKey = pair.publicKey
        }
        let prepared = Ed25519.verifyPrepared(signature: signature, message: message, publicKey: publicKey)
        let sodium = Ed25519.verifyWithSodium(signature: signature, message: message, publicKey: publicKey)
        expect(prepared == sodium, "the prepared key says \(prepared), libsodium \(sodium)")
    }

    static func expect(_ condition: Bool, _ message: @autoclosure () -> String) {
        if !condition {
            // The harness's own assertion: the fuzzer records the input that got here.
            fatalError("fuzz finding: \(message())")
        }
    }
}
