import Foundation
import Testing
import WhisperShared

/// The examples in docs/protocol.md and the schemas in docs/schemas/ are the contract;
/// these tests hold the Swift types to it.
@Suite struct ContractTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    struct Example {
        var index: Int
        var json: String
        var type: String
    }

    /// Every ```json block of docs/protocol.md (blocks marked ```json http are HTTP bodies, ```json push provider payloads).
    static func examples() throws -> [Example] {
        let text = try String(contentsOf: root.appendingPathComponent("docs/protocol.md"), encoding: .utf8)
        var examples: [Example] = []
        var current: [String]?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line == "```json" {
                current = []
            } else if current != nil, line == "```" {
                let json = current!.joined(separator: "\n")
                let object = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any]
                examples.append(Example(index: examples.count, json: json, type: object?["type"] as? String ?? ""))
                current = nil
            } else if current != nil {
                current!.append(String(line))
            }
        }
        return examples
    }

    struct Fixture: Decodable {
        var name: String
        var frame: JSONValue
    }

    static func invalidFixtures() throws -> [Fixture] {
        let data = try Data(contentsOf: root.appendingPathComponent("Tests/ContractTests/Fixtures/invalid-frames.json"))
        return try JSONDecoder().decode([Fixture].self, from: data)
    }

    /// Runs scripts/schema-check.py (python-jsonschema) over the frames; true = valid.
    static func schemaVerdicts(_ frames: [(id: String, json: String)]) throws -> [String: (valid: Bool, error: String)] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", root.appendingPathComponent("scripts/schema-check.py").path]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        var lines = ""
        for frame in frames {
            let idJSON = String(decoding: try JSONEncoder().encode(frame.id), as: UTF8.self)
            let compact = try JSONSerialization.data(withJSONObject: JSONSerialization.jsonObject(with: Data(frame.json.utf8), options: [.fragmentsAllowed]), options: [.fragmentsAllowed])
            lines += "{\"id\":\(idJSON),\"frame\":\(String(decoding: compact, as: UTF8.self))}\n"
        }
        input.fileHandleForWriting.write(Data(lines.utf8))
        try input.fileHandleForWriting.close()
        let result = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "schema-check.py failed; is python-jsonschema installed?")
        var verdicts: [String: (Bool, String)] = [:]
        for line in String(decoding: result, as: UTF8.self).split(separator: "\n") {
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as! [String: Any]
            verdicts[object["id"] as! String] = (object["valid"] as! Bool, object["error"] as? String ?? "")
        }
        return verdicts
    }

    @Test func everyExampleValidatesAgainstItsSchemaAndDecodesWithTheSwiftTypes() throws {
        let examples = try Self.examples()
        #expect(examples.count >= 46)
        let verdicts = try Self.schemaVerdicts(examples.map { ("example-\($0.index)", $0.json) })
        for example in examples {
            let verdict = verdicts["example-\(example.index)"]
            #expect(verdict?.valid == true, "example \(example.index) (\(example.type)) fails its schema: \(verdict?.error ?? "no verdict")")
            if ClientFrameType(rawValue: example.type) != nil {
                switch ClientFrameDecoder().decode(Array(example.json.utf8)) {
                case .success(let frame):
                    #expect(frame.type.rawValue == example.type)
                    // The session token is read from the payload as sent, and only privileged frames have one.
                    let payload = (try JSONSerialization.jsonObject(with: Data(example.json.utf8)) as? [String: Any])?["payload"] as? [String: Any]
                    #expect(frame.sessionToken == payload?["sessionToken"] as? String, "example \(example.index) (\(example.type)): session token")
                    #expect((frame.sessionToken != nil) == frame.type.isPrivileged, "example \(example.index) (\(example.type)): privileged but no token, or a token on an open frame")
                case .failure(let rejection):
                    Issue.record("example \(example.index) (\(example.type)) refused by the Swift decoder: \(rejection.message)")
                }
            } else {
                #expect(ServerFrameType(rawValue: example.type) != nil, "example \(example.index) has unknown type \(example.type)")
                let frame = try ServerFrameCodec.decode(Array(example.json.utf8))
                #expect(frame.type.rawValue == example.type)
            }
        }
    }

    @Test func everySchemaHasAnExampleAndASwiftType() throws {
        let exampleTypes = Set(try Self.examples().map(\.type))
        let schemaFiles = try FileManager.default.contentsOfDirectory(atPath: Self.root.appendingPathComponent("docs/schemas").path)
        let schemaTypes = Set(schemaFiles.filter { $0.hasSuffix(".json") && $0 != "common.json" }.map { String($0.dropLast(5)) })
        let swiftTypes = Set(ClientFrameType.allCases.map(\.rawValue) + ServerFrameType.allCases.map(\.rawValue))
        #expect(schemaTypes == swiftTypes, "schemas and Swift frame types differ: \(schemaTypes.symmetricDifference(swiftTypes).sorted())")
        #expect(schemaTypes.subtracting(exampleTypes).isEmpty, "frames without an example in protocol.md: \(schemaTypes.subtracting(exampleTypes).sorted())")
        #expect(Set(ClientFrameType.allCases.map(\.rawValue)).isDisjoint(with: ServerFrameType.allCases.map(\.rawValue)))
    }

    @Test func everyInvalidFixtureIsRefusedByTheSchemaAndByTheSwiftDecoder() throws {
        let fixtures = try Self.invalidFixtures()
        #expect(fixtures.count >= 50)
        let encoded = try fixtures.map { ($0.name, String(decoding: try JSONEncoder().encode($0.frame), as: UTF8.self)) }
        let verdicts = try Self.schemaVerdicts(encoded)
        for (name, json) in encoded {
            #expect(verdicts[name]?.valid == false, "schema accepts invalid fixture \"\(name)\"")
            switch ClientFrameDecoder().decode(Array(json.utf8)) {
            case .success:
                Issue.record("Swift decoder accepts invalid fixture \"\(name)\"")
            case .failure(let rejection):
                #expect(rejection.code == .invalidPayload, "\(name): \(rejection.code)")
            }
        }
    }

    @Test func clientPayloadsEncodeToFramesTheirSchemaAccepts() throws {
        // What the Swift SDK sends must pass the server's schema too.
        let session = String(repeating: "a", count: 43)
        let payloads: [(String, [UInt8])] = [
            ("register_begin", Self.frame(RegisterBegin(.init(deviceId: UUID().uuidString, platform: .android)))),
            ("update_tokens", Self.frame(UpdateTokens(sessionToken: session, .init(pushToken: .set("tok"), voipToken: .clear)))),
            ("send_message", Self.frame(SendMessage(
                sessionToken: session, .init(messageId: UUID().uuidString, from: "WSP-AAAA-BBBB-CCCC", to: "WSP-DDDD-EEEE-FFFF",
                msgType: .text, timestamp: 1_767_268_800_000, nonce: Data(count: 24).base64EncodedString(),
                ciphertext: Data(count: 20).base64EncodedString(), sig: Data(count: 64).base64EncodedString())))),
        ]
        let verdicts = try Self.schemaVerdicts(payloads.map { ($0.0, String(decoding: $0.1, as: UTF8.self)) })
        for (name, bytes) in payloads {
            #expect(verdicts[name]?.valid == true, "\(name): \(verdicts[name]?.error ?? "")")
            if case .failure(let rejection) = ClientFrameDecoder().decode(bytes) {
                Issue.record("\(name) refused: \(rejection.message)")
            }
        }
    }

    static func frame<P: ClientPayload>(_ payload: P) -> [UInt8] {
        ClientFrameCodec.encode(payload)
    }
}

/// Any JSON value, kept as it was written, for fixtures.
enum JSONValue: Codable {
    case null, bool(Bool), number(Double), string(String), array([JSONValue]), object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let value = try? container.decode(Bool.self) { self = .bool(value) }
        else if let value = try? container.decode(Double.self) { self = .number(value) }
        else if let value = try? container.decode(String.self) { self = .string(value) }
        else if let value = try? container.decode([JSONValue].self) { self = .array(value) }
        else { self = .object(try container.decode([String: JSONValue].self)) }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value):
            if value == value.rounded(), abs(value) < 9e15 { try container.encode(Int64(value)) } else { try container.encode(value) }
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }
}
