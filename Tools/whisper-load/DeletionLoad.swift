import Foundation
import Logging
import WhisperClient
import WhisperShared

/// `--deletions N`: what an account deletion costs Redis beside `--filler-keys` other keys,
/// each identity with a contact, taken and waiting messages, measured from Redis's own
/// command time and `SCAN` counters before and after.
struct DeletionLoad {
    let gateways: [String]
    let accounts: Int
    let fillerKeys: Int
    let redisURL: String
    let logger: Logger

    func run() async throws {
        guard let configuration = RedisConfiguration(url: redisURL) else { throw LoadFailure("--redis must be a redis:// URL") }
        let redis = RedisClient(configuration: configuration, logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await redis.run() }
            defer { group.cancelAll() }
            let deadline = ContinuousClock.now + .seconds(10)
            while !redis.isConnected {
                guard ContinuousClock.now < deadline else { throw LoadFailure("Redis at \(redisURL) did not answer") }
                try await Task.sleep(for: .milliseconds(20))
            }
            try await measure(redis)
        }
    }

    private func measure(_ redis: RedisClient) async throws {
        if fillerKeys > 0 {
            print("adding \(fillerKeys) other keys...")
            let fill = "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do redis.call('SET', 'filler:' .. i, 'x') end"
            for start in stride(from: 0, to: fillerKeys, by: 50_000) {
                _ = try await redis.send("EVAL", fill, 0, start, min(start + 50_000, fillerKeys) - 1)
            }
        }
        print("making \(accounts) identities, each with a contact and messages both ways...")
        var deleting: [Party] = []
        for index in 0..<accounts {
            let url = gateways[index % gateways.count]
            let (person, contact) = (try await Party.register(url: url, logger: logger), try await Party.register(url: url, logger: logger))
            try await Self.untilNotBusy { try await Party.introduce(person, contact, logger: logger) }
            let socket = WhisperConnection(url: url, logger: logger)
            try await socket.connect()
            await socket.resume(whisperId: contact.whisperId, sessionToken: contact.token)
            for text in ["one", "two", "three"] {
                let message = MessageCrypto.makeMessage(Array(text.utf8), from: (contact.whisperId, contact.keys), to: person.peer, sessionToken: contact.token)
                try await Self.untilNotBusy { _ = try await socket.send(message) }
            }
            await socket.close()
            deleting.append(person)
        }
        let keys = try await redis.send("DBSIZE").int ?? 0
        print("deleting \(accounts) identities one at a time beside \(keys) keys...")
        var redisMicroseconds: [Double] = [], roundTrips: [Double] = [], scans = 0
        for person in deleting {
            let socket = WhisperConnection(url: person.url, logger: logger)
            try await socket.connect()
            await socket.resume(whisperId: person.whisperId, sessionToken: person.token)
            let before = try await Self.counters(redis)
            let started = ContinuousClock.now
            _ = try await socket.deleteAccount(keys: person.keys)
            let took = ContinuousClock.now - started
            let after = try await Self.counters(redis)
            await socket.close()
            redisMicroseconds.append(Double(after.microseconds - before.microseconds))
            roundTrips.append(Double(took.milliseconds))
            scans += after.scans - before.scans
        }
        redisMicroseconds.sort()
        roundTrips.sort()
        let mean = redisMicroseconds.reduce(0, +) / Double(max(redisMicroseconds.count, 1))
        print(String(
            format: "deletions: %d beside %d keys; Redis time per deletion p50 %.0f µs, mean %.0f µs, max %.0f µs; key-space walks (SCAN) %d; answered after p50 %.0f ms, max %.0f ms",
            accounts, keys, Self.median(redisMicroseconds), mean, redisMicroseconds.last ?? 0, scans, Self.median(roundTrips), roundTrips.last ?? 0
        ))
    }

    /// Redis's time on commands so far (µs, every command's `usec` in `INFO
    /// commandstats`) and the `SCAN`s it answered.
    static func counters(_ redis: RedisClient) async throws -> (microseconds: Int, scans: Int) {
        let stats = try await redis.send("INFO", "commandstats").string ?? ""
        var microseconds = 0, scans = 0
        for line in stats.split(whereSeparator: \.isNewline) where line.hasPrefix("cmdstat_") {
            let fields = line.split(separator: ":", maxSplits: 1)
            guard fields.count == 2 else { continue }
            for field in fields[1].split(separator: ",") {
                if field.hasPrefix("usec="), let value = Int(field.dropFirst(5)) { microseconds += value }
                if fields[0] == "cmdstat_scan", field.hasPrefix("calls="), let value = Int(field.dropFirst(6)) { scans += value }
            }
        }
        return (microseconds, scans)
    }

    /// Runs `step` again while the server answers it busy (Redis just took a million
    /// writes, and the first messages after them may wait past the gateway's bound), at
    /// most 30 times, waiting the hint between tries; sends keep their messageId, so a
    /// retry stores nothing twice.
    private static func untilNotBusy(_ step: () async throws -> Void) async throws {
        for attempt in 1...30 {
            do {
                return try await step()
            } catch WhisperClientError.refused(.rateLimited, let message) where message.hasPrefix("the server is busy") && attempt < 30 {
                try await Task.sleep(for: .seconds(1))
            }
        }
    }

    private static func median(_ sorted: [Double]) -> Double { sorted.isEmpty ? 0 : sorted[(sorted.count - 1) / 2] }
}
