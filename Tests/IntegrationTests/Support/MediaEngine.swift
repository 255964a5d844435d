import Foundation
import Synchronization

/// One push-to-talk member's WebRTC media engine: `Tests/Media/ptt_member.py`, a real
/// aiortc stack in a Python process, driven over stdin/stdout JSON lines (the commands
/// and events are described at the top of the script).
final class MediaEngine: @unchecked Sendable {
    static let script = TestServers.repoRoot.appendingPathComponent("Tests/Media/ptt_member.py").path

    /// What a listen heard: the dominant frequency (Hz), the RMS level (of full scale),
    /// the share of the energy near the dominant frequency, and how many seconds of audio
    /// were analysed.
    struct Heard: Decodable, Sendable {
        let frequency: Double
        let level: Double
        let purity: Double
        let seconds: Double

        /// One tone of `hertz`, audible, and nothing else of note (two tones mixed at
        /// equal strength have a purity near one half).
        func isTone(_ hertz: Double) -> Bool { abs(frequency - hertz) < 10 && level > 0.05 && purity > 0.8 }
    }

    struct Event: Decodable, Sendable {
        let ev: String
        var peer: String?
        var sdp: String?
        var state: String?
        var id: Int?
        var played: Heard?
        var peers: [String: Heard]?
        var offered: [String]?
        var chosen: [String: String]?
        var codecs: [String]?
        var op: String?
        var message: String?
    }

    struct Command: Encodable {
        var op: String
        var peer: String?
        var sdp: String?
        var urls: [String]?
        var username: String?
        var credential: String?
        var frequency: Double?
        var holder: String?
        var id: Int?
        var ms: Int?
    }

    let name: String
    private let process = Process()
    private let input = Pipe()
    private let stderrFile: URL
    private let events = Mutex<[Event]>([])
    private let listens = Atomic<Int>(0)

    init(name: String) throws {
        self.name = name
        stderrFile = FileManager.default.temporaryDirectory.appendingPathComponent("whisper-media-\(UUID().uuidString).log")
        FileManager.default.createFile(atPath: stderrFile.path, contents: nil)
        let output = Pipe()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [MotoProcess.python, Self.script]
        process.standardInput = input
        process.standardOutput = output
        process.standardError = try FileHandle(forWritingTo: stderrFile)
        try process.run()
        let reading = output.fileHandleForReading
        let thread = Thread { [weak self] in
            var pending = Data()
            while true {
                let chunk = reading.availableData
                if chunk.isEmpty { return }
                pending.append(chunk)
                while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    let line = pending[pending.startIndex..<newline]
                    pending = Data(pending[pending.index(after: newline)...])
                    if let event = try? JSONDecoder().decode(Event.self, from: line) {
                        self?.events.withLock { $0.append(event) }
                    }
                }
            }
        }
        thread.start()
    }

    func send(_ command: Command) throws {
        var line = try JSONEncoder().encode(command)
        line.append(UInt8(ascii: "\n"))
        try input.fileHandleForWriting.write(contentsOf: line)
    }

    /// Takes the first event named `ev` (from `peer`, when given) that `matching` accepts,
    /// waiting for it; fails at once when the engine reported an error or exited.
    func next(_ ev: String, peer: String? = nil, timeout: Duration = .seconds(30), matching: @escaping @Sendable (Event) -> Bool = { _ in true }) async throws -> Event {
        var found: Event?
        do {
            try await waitUntil(timeout: timeout) {
                let taken = try events.withLock { events in
                    if let failure = events.first(where: { $0.ev == "error" }) {
                        throw TestSetupError("the engine failed on \(failure.op ?? "?"): \(failure.message ?? "")")
                    }
                    guard let index = events.firstIndex(where: { $0.ev == ev && (peer == nil || $0.peer == peer) && matching($0) }) else { return false }
                    found = events.remove(at: index)
                    return true
                }
                if taken { return true }
                guard process.isRunning else { throw TestSetupError("the engine exited") }
                return false
            }
        } catch {
            throw TestSetupError("\(name), waiting for \(ev) \(peer ?? ""): \(error); stderr: \(diagnostics)")
        }
        guard let found else { throw TestSetupError("\(name): no \(ev) event") }
        return found
    }

    /// Records `milliseconds` of what arrives and what is played, and analyses it.
    func listen(milliseconds: Int = 1_000) async throws -> Event {
        let id = listens.add(1, ordering: .relaxed).newValue
        try send(Command(op: "listen", id: id, ms: milliseconds))
        return try await next("heard") { $0.id == id }
    }

    /// Listens until something is played (the tone takes a moment to start after a
    /// grant), at most `attempts` windows; that window.
    func listenUntilPlayed(attempts: Int = 20) async throws -> Event {
        for _ in 0..<attempts {
            let heard = try await listen()
            if (heard.played?.level ?? 0) > 0.05 { return heard }
        }
        throw TestSetupError("\(name) played nothing in \(attempts) windows; \(diagnostics)")
    }

    /// The end of the engine's stderr (for failure messages).
    var diagnostics: String {
        String((try? String(contentsOf: stderrFile, encoding: .utf8))?.suffix(2_000) ?? "")
    }

    /// Closes its input (the engine closes its connections and exits) and waits for it.
    func stop() async throws {
        try? input.fileHandleForWriting.close()
        try await waitUntil(timeout: .seconds(10)) { !process.isRunning }
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: stderrFile)
    }
}
