import Foundation
import Testing
@testable import WhisperProtocol
import WhisperShared

/// The fast path for the busiest frames (`HotFrames`, `FastJSON`) must never answer
/// differently from the general path: whatever it accepts, the general decoder accepts
/// as the same value; what it writes, the general decoder reads back unchanged and the
/// schemas accept.
@Suite struct FastPathTests {
    static let session = String(repeating: "t", count: 43)
    static let sendMessage = #"{"type":"send_message","requestId":"req-1","payload":{"protocolVersion":1,"cryptoVersion":1,"sessionToken":"\#(session)","messageId":"6f1c7a52-3f4e-4b8a-9d1e-2a7c5b9e0f11","from":"WSP-AAAA-BBBB-CCCC","to":"WSP-DDDD-EEEE-FFFF","msgType":"text","timestamp":1767268800000,"nonce":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","ciphertext":"SGVsbG8sIHdvcmxkIQ==","sig":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==","replyTo":"0b7a1c52-3f4e-4b8a-9d1e-2a7c5b9e0f11"}}"#
    static let receipt = #"{"type":"delivery_receipt","payload":{"protocolVersion":1,"cryptoVersion":1,"sessionToken":"\#(session)","messageId":"6f1c7a52-3f4e-4b8a-9d1e-2a7c5b9e0f11","from":"WSP-DDDD-EEEE-FFFF","to":"WSP-AAAA-BBBB-CCCC","status":"delivered","timestamp":1767268800000}}"#
    static let ping = #"{"type":"ping","requestId":"p-1","payload":{"protocolVersion":1,"cryptoVersion":1}}"#
    static let barePing = #"{"type":"ping","payload":{}}"#
    static let pong = #"{"type":"pong","requestId":"p-1","payload":{"serverTime":1767268800000}}"#
    static let received = #"{"type":"message_received","payload":{"messageId":"6f1c7a52-3f4e-4b8a-9d1e-2a7c5b9e0f11","from":"WSP-AAAA-BBBB-CCCC","to":"WSP-DDDD-EEEE-FFFF","msgType":"text","timestamp":1767268800000,"nonce":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","ciphertext":"SGVsbG8sIHdvcmxkIQ==","sig":"AAAA","replyTo":null}}"#
    static let accepted = #"{"type":"message_accepted","requestId":"r","payload":{"messageId":"6f1c7a52-3f4e-4b8a-9d1e-2a7c5b9e0f11","status":"sent"}}"#
    static let delivered = #"{"type":"message_delivered","payload":{"messageId":"6f1c7a52-3f4e-4b8a-9d1e-2a7c5b9e0f11","status":"read","timestamp":5}}"#

    /// Records a difference between the two paths for one client frame; true when the
    /// fast path took the frame.
    @discardableResult
    static func agree(_ bytes: [UInt8], _ label: @autoclosure () -> String) -> Bool {
        if let difference = FastPathAudit.disagreement(clientFrame: bytes) {
            Issue.record("\(difference): \(label())")
        }
        return FastPathAudit.takesFastPath(clientFrame: bytes)
    }

    @discardableResult
    static func agreeOnServerFrame(_ bytes: [UInt8], _ label: @autoclosure () -> String) -> Bool {
        if let difference = FastPathAudit.disagreement(serverFrame: bytes) {
            Issue.record("\(difference): \(label())")
        }
        return FastPathAudit.takesFastPath(serverFrame: bytes)
    }

    @Test func theCommonFramesTakeTheFastPath() {
        #expect(Self.agree(Array(Self.sendMessage.utf8), "send_message"))
        #expect(Self.agree(Array(Self.receipt.utf8), "delivery_receipt"))
        #expect(Self.agree(Array(Self.ping.utf8), "ping"))
        #expect(Self.agree(Array(Self.barePing.utf8), "ping without versions"))
        for frame in [Self.received, Self.accepted, Self.delivered, Self.pong] {
            #expect(Self.agreeOnServerFrame(Array(frame.utf8), frame))
        }
        // White space between tokens is still the common shape.
        let spaced = Self.receipt.replacingOccurrences(of: ",", with: " ,\n\t").replacingOccurrences(of: ":", with: " : ")
        #expect(Self.agree(Array(spaced.utf8), "spaced receipt"))
    }

    @Test func everythingOutsideTheSubsetIsLeftToTheGeneralDecoder() {
        let cases: [String] = [
            Self.sendMessage.replacingOccurrences(of: "SGVsbG8", with: #"SGV\u0073bG8"#),      // an escape
            Self.sendMessage.replacingOccurrences(of: "\"text\"", with: "\"t\u{e9}xt\""),      // non-ASCII
            Self.sendMessage.replacingOccurrences(of: "1767268800000", with: "1767268800000.0"), // a fraction
            Self.sendMessage.replacingOccurrences(of: "1767268800000", with: "17672688e5"),     // an exponent
            Self.sendMessage.replacingOccurrences(of: "1767268800000", with: "01767268800000"), // a leading zero
            Self.sendMessage.replacingOccurrences(of: "\"cryptoVersion\":1", with: "\"cryptoVersion\":1,\"cryptoVersion\":1"), // a repeated key
            Self.sendMessage.replacingOccurrences(of: "\"replyTo\"", with: "\"reactions\":{\"x\":[]},\"replyTo\""), // a nested value
            Self.sendMessage.replacingOccurrences(of: "\"protocolVersion\":1", with: "\"protocolVersion\":2"), // unsupported version
            Self.sendMessage.replacingOccurrences(of: "WSP-AAAA", with: "WSP-aaaa"),           // breaks a rule
            Self.sendMessage + " x",                                                           // trailing text
            Self.sendMessage.replacingOccurrences(of: "\"req-1\"", with: "\"req 1\""),         // a requestId off its alphabet
            Self.ping.replacingOccurrences(of: "\"cryptoVersion\":1", with: "\"cryptoVersion\":9"), // a ping's unsupported version
            Self.ping.replacingOccurrences(of: "\"cryptoVersion\":1", with: "\"cryptoVersion\":1,\"extra\":1"), // an unknown field
            Self.ping.replacingOccurrences(of: "\"protocolVersion\":1", with: "\"protocolVersion\":\"1\""), // a version as a string
        ]
        for (index, text) in cases.enumerated() {
            #expect(HotFrames.clientFrame(Array(text.utf8)) == nil, "case \(index) took the fast path")
            // And the general decoder's answer is the answer.
            let answer = ClientFrameDecoder().decode(Array(text.utf8))
            let general = ClientFrameDecoder().decodeGeneral(Array(text.utf8))
            switch (answer, general) {
            case (.failure(let a), .failure(let b)): #expect(a == b, "case \(index)")
            case (.success(let a), .success(let b)): #expect(a.type == b.type && a.requestId == b.requestId, "case \(index)")
            default: Issue.record("case \(index): the decoder's answer is not the general decoder's")
            }
        }
        #expect(FastJSON.object(Array(#"{"a":{"b":{"c":1}}}"#.utf8)) == nil, "three levels deep")
        #expect(FastJSON.object(Array(#"{"a":1234567890123456789}"#.utf8)) == nil, "19 digits")
        #expect(FastJSON.object(Array(#"{"a":123456789012345678}"#.utf8))?.fields.first?.value == .integer(123_456_789_012_345_678), "18 digits")
        #expect(FastJSON.object(Array(#"{"a":nul}"#.utf8)) == nil)
        #expect(FastJSON.object(Array(#"{"a":"b""#.utf8)) == nil)
        #expect(FastJSON.object(Array(#" {"a" : "b" , "c" : 0 } "#.utf8))?.fields.count == 2)
    }

    /// Numbers at and past the edges of Int64 and Double, negative zero, exponents and
    /// long fractions, in every integer field of the hot frames: both paths agree, and
    /// whatever no field can hold is refused with INVALID_PAYLOAD (never a trap).
    @Test func numbersPastEveryBoundGetTheSameAnswerBothWays() {
        let numbers = [
            "0", "-0", "0.0", "-0.0", "1.0", "10e-1", "1E0", "1e2", "999999999999999999", "1000000000000000000",
            "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
            "18446744073709551616", "123456789012345678901234567890", "1e400", "-1e400", "1e-400",
            "1.0000000000000000000000000001", "1767268800000.5",
        ]
        let unrepresentable: Set<String> = [
            "9223372036854775808", "-9223372036854775809", "18446744073709551616", "123456789012345678901234567890",
            "1e400", "-1e400", "1767268800000.5",
        ]
        // "1.0000000000000000000000000001" is read as the double 1.0, by Foundation and by
        // python-jsonschema alike: the integer 1 (protocol.md, section 2, Numbers).
        for base in [Self.sendMessage, Self.receipt] {
            for field in ["protocolVersion", "cryptoVersion", "timestamp"] {
                let current = field == "timestamp" ? "1767268800000" : "1"
                for number in numbers {
                    let text = base.replacingOccurrences(of: "\"\(field)\":\(current)", with: "\"\(field)\":\(number)")
                    let bytes = Array(text.utf8)
                    Self.agree(bytes, "\(field) = \(number)")
                    if unrepresentable.contains(number) {
                        if case .failure(let rejection) = ClientFrameDecoder().decode(bytes) {
                            #expect(rejection.code == .invalidPayload, "\(field) = \(number)")
                        } else {
                            Issue.record("\(field) = \(number) was accepted")
                        }
                    }
                }
            }
        }
    }

    @Test func everyExampleAndInvalidFixtureGetsTheSameAnswerBothWays() throws {
        var taken = 0
        for example in try ContractTests.examples() where Self.agree(Array(example.json.utf8), "example \(example.index)") {
            taken += 1
        }
        for example in try ContractTests.examples() {
            Self.agreeOnServerFrame(Array(example.json.utf8), "example \(example.index)")
        }
        #expect(taken >= 2, "the examples of send_message and delivery_receipt should take the fast path")
        for fixture in try ContractTests.invalidFixtures() {
            let bytes = Array(try JSONEncoder().encode(fixture.frame))
            #expect(HotFrames.clientFrame(bytes) == nil, "fast path accepts invalid fixture \(fixture.name)")
        }
    }

    /// Random edits of valid frames (a fixed seed, so a failure can be replayed): the
    /// fast path may refuse to answer, but never answers differently.
    @Test func randomEditsNeverMakeThePathsDisagree() {
        var random = SplitMix(seed: 0x5EED_F00D)
        let alphabet = Array(#"{}[],:"\ 0123456789-.eE+nulltruefalseWSPABCDEFZ=/"#.utf8) + [0x00, 0x0A, 0x7F, 0x80, 0xC3, 0xFF]
        var clientTaken = 0
        var serverTaken = 0
        for round in 0..<12_000 {
            let bases = [Self.sendMessage, Self.receipt, Self.received, Self.accepted, Self.delivered]
            var bytes = Array(bases[round % bases.count].utf8)
            for _ in 0..<(1 + Int(random.next() % 3)) {
                let position = Int(random.next() % UInt64(bytes.count))
                switch random.next() % 4 {
                case 0: bytes[position] = alphabet[Int(random.next() % UInt64(alphabet.count))]
                case 1: bytes.remove(at: position)
                case 2: bytes.insert(alphabet[Int(random.next() % UInt64(alphabet.count))], at: position)
                default:
                    let end = min(bytes.count, position + 1 + Int(random.next() % 12))
                    bytes.insert(contentsOf: bytes[position..<end], at: position)
                }
                if bytes.isEmpty { bytes = [UInt8(ascii: "{")] }
            }
            if Self.agree(bytes, "round \(round): \(String(decoding: bytes, as: UTF8.self))") { clientTaken += 1 }
            if Self.agreeOnServerFrame(bytes, "round \(round): \(String(decoding: bytes, as: UTF8.self))") { serverTaken += 1 }
        }
        // Edits inside string values often leave a valid frame: both kinds are exercised.
        #expect(clientTaken > 100 && serverTaken > 100, "client \(clientTaken), server \(serverTaken)")
    }

    /// Refusals are written by the fast writer too (past capacity there is one per
    /// refused frame): the same JSON value as Foundation's encoder writes (its key order
    /// varies on Linux, so the values are compared), whatever the message holds, and read
    /// back the same both ways.
    @Test func refusalsAreWrittenAsFoundationWritesThem() throws {
        let awkward = ["plain", "quote \" here", "back\\slash", "new\nline\ttab\r", "\u{01}\u{1F}\u{7F}", "caf\u{e9} \u{1F600}", "a/b", ""]
        for (index, text) in awkward.enumerated() {
            for code in ErrorCode.allCases {
                let payload = ErrorPayload(code: code, message: text, requestId: index % 2 == 0 ? "r-\(index)" : nil)
                var writer = FastJSONWriter()
                payload.write(to: &writer)
                let foundation = try ProtocolJSON.encoder.encode(payload)
                let fastValue = try JSONSerialization.jsonObject(with: Data(writer.bytes)) as? NSDictionary
                let foundationValue = try JSONSerialization.jsonObject(with: foundation) as? NSDictionary
                #expect(fastValue != nil && fastValue == foundationValue, "\(String(decoding: writer.bytes, as: UTF8.self)) against \(String(decoding: foundation, as: UTF8.self))")
                let bytes = ServerFrameCodec.encodeError(code, text, requestId: payload.requestId)
                #expect(try ServerFrameCodec.decodeGeneral(bytes).payload(as: ErrorPayload.self) == payload)
                #expect(try ServerFrameCodec.decode(bytes).payload(as: ErrorPayload.self) == payload)
            }
        }
    }

    @Test func writtenFramesReadBackTheSameAndPassTheirSchemas() throws {
        var random = SplitMix(seed: 42)
        let awkward = ["plain", "quote \" here", "back\\slash", "new\nline\ttab\r", "\u{01}\u{1F}\u{7F}", "caf\u{e9} \u{1F600}", "a/b", ""]
        var frames: [(String, String)] = []
        for round in 0..<200 {
            func text() -> String { awkward[Int(random.next() % UInt64(awkward.count))] + String(random.next() % 1000) }
            let message = MessageReceived(SendMessageFields(
                messageId: text(), from: text(), to: text(),
                msgType: MessageType.allCases[round % MessageType.allCases.count], timestamp: Int64(random.next() % 9_007_199_254_740_991),
                nonce: text(), ciphertext: text(), sig: text(), replyTo: round % 2 == 0 ? text() : nil,
                reactions: round % 5 == 0 ? [text(): [text()]] : nil,
                attachment: round % 7 == 0 ? AttachmentPointer(
                    objectKey: text(), contentType: text(), ciphertextSize: Int64(round), fileNonce: text(),
                    fileKeyBox: FileKeyBox(nonce: text(), ciphertext: text())
                ) : nil,
                directoryHead: round % 11 == 0 ? DirectoryHead(
                    epoch: Int64(round + 1), logRoot: Array(repeating: UInt8(round % 256), count: 32), prefixRoot: Array(repeating: 7, count: 32),
                    publishedAt: Int64(round), keyId: text(), signature: Array(repeating: 9, count: 64)
                ) : nil
            ), groupId: round % 3 == 0 ? text() : nil)
            let bytes = ServerFrameCodec.encode(message, requestId: round % 2 == 0 ? "r-\(round)" : nil)
            let general = try ServerFrameCodec.decodeGeneral(bytes)
            #expect(general.payload(as: MessageReceived.self) == message)
            #expect(general.requestId == (round % 2 == 0 ? "r-\(round)" : nil))
            #expect(try ProtocolJSON.decoder.decode(MessageReceived.self, from: Data(message.payloadJSON)) == message)
        }
        // Frames as the server sends them, checked by the JSON Schemas.
        let message = MessageReceived(SendMessageFields(
            messageId: UUID().uuidString.lowercased(), from: "WSP-AAAA-BBBB-CCCC", to: "WSP-DDDD-EEEE-FFFF", msgType: .text,
            timestamp: 1_767_268_800_000, nonce: Data(count: 24).base64EncodedString(), ciphertext: Data(count: 40).base64EncodedString(),
            sig: Data(count: 64).base64EncodedString(), replyTo: UUID().uuidString.lowercased(), reactions: ["\u{1F44D}": ["WSP-AAAA-BBBB-CCCC"]],
            directoryHead: DirectoryHead(
                epoch: 42, logRoot: Array(repeating: 1, count: 32), prefixRoot: Array(repeating: 2, count: 32), publishedAt: 1_767_268_790_000,
                keyId: "5f1c0a9e7b3d2c48", signature: Array(repeating: 3, count: 64)
            )
        ))
        frames.append(("message_received", String(decoding: ServerFrameCodec.encode(message), as: UTF8.self)))
        frames.append(("message_accepted", String(decoding: ServerFrameCodec.encode(MessageAccepted(messageId: message.messageId), requestId: "r-1"), as: UTF8.self)))
        frames.append(("message_delivered", String(decoding: ServerFrameCodec.encode(MessageDelivered(messageId: message.messageId, status: .read, timestamp: 1)), as: UTF8.self)))
        frames.append(("delivery_receipt", String(decoding: ClientFrameCodec.encode(DeliveryReceipt(
            sessionToken: Self.session, .init(messageId: message.messageId, from: message.to, to: message.from, status: .delivered, timestamp: 7)
        ), requestId: "r-2"), as: UTF8.self)))
        frames.append(("error", String(decoding: ServerFrameCodec.encodeError(.rateLimited, "the server is busy; retry in 25 ms", requestId: "r-3"), as: UTF8.self)))
        frames.append(("ping", String(decoding: ClientFrameCodec.encode(Ping(protocolVersion: 1, cryptoVersion: 1), requestId: "r-4"), as: UTF8.self)))
        frames.append(("ping without versions", String(decoding: ClientFrameCodec.encode(Ping()), as: UTF8.self)))
        frames.append(("pong", String(decoding: ServerFrameCodec.encode(Pong(serverTime: 1_767_268_800_000), requestId: "r-4"), as: UTF8.self)))
        for ping in [Ping(), Ping(protocolVersion: 1, cryptoVersion: 1), Ping(protocolVersion: 1)] {
            let bytes = ClientFrameCodec.encode(ping, requestId: "r-5")
            #expect(try ClientFrameDecoder().decodeGeneral(bytes).get().payload as? Ping == ping)
            #expect(HotFrames.clientFrame(bytes)?.payload as? Ping == ping)
        }
        let pong = ServerFrameCodec.encode(Pong(serverTime: 5), requestId: "r-6")
        #expect(try ServerFrameCodec.decodeGeneral(pong).payload(as: Pong.self) == Pong(serverTime: 5))
        #expect(HotFrames.serverFrame(pong)?.payload as? Pong == Pong(serverTime: 5))
        let verdicts = try ContractTests.schemaVerdicts(frames)
        for (name, _) in frames {
            #expect(verdicts[name]?.valid == true, "\(name): \(verdicts[name]?.error ?? "missing")")
        }
    }

    /// Every field a hot payload declares (`fieldNames`) is one its fast writer writes,
    /// with the value Foundation's encoder gives it: a field added to the payload and not
    /// to the writer fails here (the payloads below set every optional field; one added
    /// later is set here too, or it fails as missing).
    @Test func theFastWritersWriteEveryDeclaredField() throws {
        let message = SendMessageFields(
            messageId: "5d7bb0c4-1f0a-4f7e-9a57-3c1f2b7a9e10", from: "WSP-AAAA-BBBB-CCCC", to: "WSP-DDDD-EEEE-FFFF", msgType: .image,
            timestamp: 1_767_268_800_000, nonce: "bm9uY2U=", ciphertext: "Y2lwaGVy", sig: "c2ln", replyTo: "b4e1c1d2-0000-4000-8000-000000000001",
            reactions: ["\u{1F44D}": ["WSP-AAAA-BBBB-CCCC"]],
            attachment: AttachmentPointer(
                objectKey: "att/1", contentType: "image/png", ciphertextSize: 1_024, fileNonce: "Zm4=", fileKeyBox: FileKeyBox(nonce: "bg==", ciphertext: "Yw==")
            ),
            directoryHead: DirectoryHead(
                epoch: 42, logRoot: Array(repeating: 1, count: 32), prefixRoot: Array(repeating: 2, count: 32), publishedAt: 1_767_268_790_000,
                keyId: "5f1c0a9e7b3d2c48", signature: Array(repeating: 3, count: 64)
            )
        )
        func written<F: HotFields & Encodable>(_ fields: F) throws -> (fast: NSDictionary, foundation: NSDictionary) {
            var writer = FastJSONWriter()
            writer.beginObject()
            fields.write(fieldsTo: &writer)
            writer.endObject()
            let fast = try #require(try JSONSerialization.jsonObject(with: Data(writer.bytes)) as? NSDictionary)
            let foundation = try #require(try JSONSerialization.jsonObject(with: ProtocolJSON.encoder.encode(fields)) as? NSDictionary)
            #expect(Set(fast.allKeys.compactMap { $0 as? String }) == Set(F.fieldNames), "\(F.self): written \(fast.allKeys), declared \(F.fieldNames)")
            return (fast, foundation)
        }
        for (fast, foundation) in [
            try written(message),
            try written(GroupSendMessageFields(groupId: "g-1", message: message)),
            try written(DeliveryReceiptFields(messageId: message.messageId, from: message.to, to: message.from, status: .read, timestamp: 7)),
        ] {
            #expect(fast == foundation)
        }
    }

    /// Every field a hot payload declares (`fieldNames`, from its `CodingKeys`) is one its
    /// fast reader knows: read, or left to the general path by its value. A field added to
    /// the payload and not to the reader fails here, before the reader could pass a frame
    /// without it.
    @Test func theFastReadersKnowEveryDeclaredField() {
        func unknown<F: HotFields>(_: F.Type) -> [String] {
            F.fieldNames.filter { name in
                ![FastJSON.Value.null, .string(""), .integer(0)].contains { value in
                    var reader = F.Reader()
                    return reader.read(FastJSON.Field(key: name, value: value))
                }
            }
        }
        #expect(unknown(SendMessageFields.self).isEmpty, "\(unknown(SendMessageFields.self))")
        #expect(unknown(GroupSendMessageFields.self).isEmpty, "\(unknown(GroupSendMessageFields.self))")
        #expect(unknown(DeliveryReceiptFields.self).isEmpty, "\(unknown(DeliveryReceiptFields.self))")
    }
}

/// A small fixed-seed generator (SplitMix64), so random tests replay exactly.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
