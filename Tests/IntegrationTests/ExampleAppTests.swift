import Foundation
import Testing

/// The minimal app of docs/sdk.md (`whisper-example`, Examples/WhisperExample), built on
/// the SDK alone, run as a person would run it: against the eight services as processes
/// here, and through the edge of `scripts/up --topology` in TopologyTests.
@Suite struct ExampleAppTests {
    @Test func theExampleAppMakesIdentitiesSendsReceivesAndSeesTheReceipt() async throws {
        let stack = try await ProcessStack.start()
        defer { stack.discard() }
        try await Self.runs(websocket: "ws://127.0.0.1:\(try stack.service("gateway").port)/ws", auth: try stack.service("auth").baseURL)
    }

    /// Runs `whisper-example` against a server and checks what it printed: two identities,
    /// a message each way's receipt, and no directory alert.
    static func runs(websocket: String, auth: String) async throws {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("whisper-example-\(UUID().uuidString).out")
        FileManager.default.createFile(atPath: output.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: output) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "\(Executables.binPath)/whisper-example")
        process.arguments = ["--websocket", websocket, "--auth-url", auth]
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = process.standardOutput
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        try await waitUntil(timeout: .seconds(120)) { !process.isRunning }
        let printed = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
        #expect(process.terminationStatus == 0, "whisper-example: \(printed)")
        #expect(printed.contains("bob: message from WSP-"))
        #expect(printed.contains("Hello Bob, from an app on the Whisper SDK."))
        #expect(printed.contains("was delivered"))
        #expect(printed.contains("done: 1 message delivered and acknowledged, 0 key directory alert(s)"))
        #expect(!printed.contains("ALERT"))
    }
}
