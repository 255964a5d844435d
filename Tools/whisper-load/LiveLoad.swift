import Foundation
import Logging
import WhisperClient
import WhisperShared

/// `whisper-load --live-listeners N`: one Whisperer typing at a fixed rate to N joined
/// listeners (spread over the gateways), each keystroke timed from the Whisperer's send to
/// each listener's decrypted text (one process, one clock). A keystroke is one packet; a
/// line of `lineLength` characters ends with return (a packet of its own, not timed).
struct LiveLoad {
    let gateways: [String]
    let listeners: Int
    let keysPerSecond: Int
    let duration: Int
    let logger: Logger
    static let lineLength = 40

    /// Sent-at times (uptime ns) by keystroke number, and arrivals, shared with the listeners' tasks.
    actor Clock {
        var sentAt: [Int: UInt64] = [:]
        var latencies: [Double] = []
        var firstMeasured = Int.max

        func sent(_ index: Int, at time: UInt64) { sentAt[index] = time }
        func arrived(_ index: Int, at time: UInt64) {
            guard index >= firstMeasured, let sent = sentAt[index] else { return }
            latencies.append(Double(time &- sent) / 1_000_000)
        }
        func measureFrom(_ index: Int) { firstMeasured = index }
    }

    func run() async throws {
        print("registering a Whisperer and \(listeners) listener device(s) over \(gateways.count) gateway(s)...")
        let owner = WhisperConnection(url: gateways[0], logger: logger)
        try await owner.connect()
        _ = try await owner.register(keys: WhisperKeys(seed: SecureBytes.random(64)), deviceId: RandomID.uuid(), platform: .android)
        let conversation = try await owner.createLiveConversation(name: "Benchmark")
        let whisperer = LiveWhisperer(connection: owner, conversationId: conversation.conversationId, name: "Bench")
        let requests = AsyncStream<String>.makeStream()
        let whispererEvents = Task {
            for await frame in owner.events {
                if case .request(let id, _) = try? await whisperer.handle(frame) { requests.continuation.yield(id) }
            }
        }
        try await whisperer.start()

        let clock = Clock()
        var tasks: [Task<Void, Never>] = []
        var joined = 0
        for index in 0..<listeners {
            let url = gateways[index % gateways.count]
            let device = try await ListenerDevice.issue(websocketURL: url)
            let connection = WhisperConnection(url: url, listenerDevice: device, logger: logger)
            try await connection.connect()
            let listener = LiveListener(connection: connection, conversationId: conversation.conversationId, name: "L\(index)")
            let admitted = AsyncStream<Void>.makeStream()
            tasks.append(Task {
                for await frame in connection.events {
                    let now = DispatchTime.now().uptimeNanoseconds
                    switch try? await listener.handle(frame) {
                    case .admitted: admitted.continuation.yield()
                    case .text(let transcript):
                        let index = transcript.past.count * (Self.lineLength + 1) + transcript.live.unicodeScalars.count
                        await clock.arrived(index, at: now)
                    default: break
                    }
                }
            })
            try await listener.start()
            var iterator = requests.stream.makeAsyncIterator()
            guard let id = await iterator.next() else { break }
            try await whisperer.admit(id)
            var waiting = admitted.stream.makeAsyncIterator()
            _ = await waiting.next()
            joined += 1
        }
        print("\(joined) listeners joined; typing \(keysPerSecond) keys/s for \(duration) s (2 s warm-up)")
        let interval = UInt64(1_000_000_000 / max(1, keysPerSecond))
        let start = DispatchTime.now().uptimeNanoseconds
        let warmUp = 2 * keysPerSecond
        let total = (duration + 2) * keysPerSecond
        var line = ""
        var index = 0
        for keystroke in 0..<total {
            let due = start &+ UInt64(keystroke) &* interval
            let now = DispatchTime.now().uptimeNanoseconds
            if due > now { try await Task.sleep(nanoseconds: due - now) }
            if keystroke == warmUp { await clock.measureFrom(index + 1) }
            if line.unicodeScalars.count == Self.lineLength {
                index += 1
                try await whisperer.newline()
                line = ""
                continue
            }
            line += String(UnicodeScalar(UInt8(97 + keystroke % 26)))
            index += 1
            await clock.sent(index, at: DispatchTime.now().uptimeNanoseconds)
            try await whisperer.type(line)
        }
        // Let the last packets arrive.
        try await Task.sleep(for: .milliseconds(500))
        let latencies = await clock.latencies.sorted()
        let measured = total - warmUp
        func at(_ p: Double) -> Double { latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))] }
        print(String(
            format: "live: %d listeners, %d keystrokes sent (%d measured), %d deliveries timed; latency ms p50 %.2f p95 %.2f p99 %.2f max %.2f",
            joined, total, measured, latencies.count, at(0.5), at(0.95), at(0.99), latencies.last ?? 0
        ))
        print("sent \(total), keystrokes")
        whispererEvents.cancel()
        tasks.forEach { $0.cancel() }
    }
}
