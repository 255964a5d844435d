import ArgumentParser
import Foundation
import Logging
import PostgresNIO
import PushFakes
import WhisperMessaging
import WhisperShared

/// Measures one push-sender against a local APNs stand-in (HTTP/2 over TLS, answering
/// 200 at once): the time from a wake-up job entering `stream:push` to the provider
/// receiving the push at a steady rate, then how many wake-ups a second it sustains
/// with a backlog. `scripts/bench --push` runs it with its own PostgreSQL and Redis
/// (WHISPER_POSTGRES_URL, WHISPER_REDIS_URL); figures go to docs/benchmarks.md.
@main
struct WhisperPushBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "whisper-push-bench")

    @Option(help: "The push-sender executable to start.")
    var pushSender: String

    @Option(help: "Offline iOS identities the wake-ups go to.")
    var users = 500

    @Option(help: "Wake-ups a second in the latency phase.")
    var rate = 500

    @Option(help: "Seconds of the latency phase.")
    var duration = 10

    @Option(help: "Wake-ups queued at once in the throughput phase.")
    var backlog = 20_000

    @Option(help: "HTTP port of the push-sender.")
    var port = 18083

    func run() async throws {
        var logger = Logger(label: "whisper-push-bench")
        logger.logLevel = .warning
        let environment = ProcessInfo.processInfo.environment
        guard let postgresURL = environment["WHISPER_POSTGRES_URL"], let postgres = PostgresSettings(url: postgresURL),
              let redisURL = environment["WHISPER_REDIS_URL"], let redisConfiguration = RedisConfiguration(url: redisURL) else {
            throw ValidationError("set WHISPER_POSTGRES_URL and WHISPER_REDIS_URL")
        }
        let certificates = try TestCertificates.make()
        let keys = try ProviderKeys()
        let apns = try await FakeHTTP2Server(certificates: certificates) { _ in .ok }
        let keyPath = try keys.writeAPNsKey()

        let database = PostgresClient(configuration: postgres.clientConfiguration, backgroundLogger: logger)
        let redis = RedisClient(configuration: redisConfiguration, logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await database.run() }
            group.addTask { try await redis.run() }
            defer { group.cancelAll() }
            while !redis.isConnected { try await Task.sleep(for: .milliseconds(20)) }

            // Identities with an iOS device and a push token each.
            var tokens: [String: String] = [:]
            var ids: [String] = []
            for _ in 0..<users {
                let whisperId = WhisperID.generate()
                let token = (0..<32).map { _ in UInt8.random(in: 0...255) }.hexString
                let key = ByteBuffer(bytes: (0..<32).map { _ in UInt8.random(in: 0...255) })
                try await database.query(
                    "INSERT INTO users (whisper_id, enc_public_key, sign_public_key) VALUES (\(whisperId), \(key), \(key))", logger: logger
                )
                try await database.query(
                    """
                    INSERT INTO devices (device_id, whisper_id, platform, push_token)
                    VALUES (\(UUID()), \(whisperId), 'ios', \(token))
                    """,
                    logger: logger
                )
                tokens[token] = whisperId
                ids.append(whisperId)
            }

            var childEnvironment = environment
            childEnvironment["PUSH_SENDER_HTTP_PORT"] = "\(port)"
            childEnvironment["WHISPER_INSTANCE_ID"] = "bench-push-sender"
            childEnvironment["PUSH_APNS_KEY_PATH"] = keyPath
            childEnvironment["PUSH_APNS_KEY_ID"] = keys.apnsKeyID
            childEnvironment["PUSH_APNS_TEAM_ID"] = keys.teamID
            childEnvironment["PUSH_APNS_TOPIC"] = "app.whisper.bench"
            childEnvironment["PUSH_APNS_URL"] = apns.baseURL
            childEnvironment["PUSH_TLS_EXTRA_ROOTS"] = certificates.caPath
            childEnvironment["PUSH_COALESCE_WINDOW_SECONDS"] = "0"
            let process = Process()
            process.executableURL = URL(fileURLWithPath: pushSender)
            process.environment = childEnvironment
            try process.run()
            defer {
                process.terminate()
                process.waitUntilExit()
            }

            // Warm-up: one wake-up through (connection, provider token).
            try await add([job(to: ids[0])], on: redis)
            try await waitFor(apns, count: 1, limit: .seconds(30))

            // Phase 1: a steady rate; latency from the job's creation to the provider.
            let before = apns.requestCount
            var sent: [String: [Int64]] = [:]
            let total = rate * duration
            let tick: Duration = .milliseconds(10)
            let start = ContinuousClock.now
            var added = 0
            while added < total {
                let due = min(total, Int(Double(rate) * (ContinuousClock.now - start).seconds) + 1)
                var batch: [PushStream.Job] = []
                while added < due {
                    let job = job(to: ids[added % ids.count])
                    sent[job.to, default: []].append(job.at)
                    batch.append(job)
                    added += 1
                }
                if !batch.isEmpty { try await add(batch, on: redis) }
                try await Task.sleep(for: tick)
            }
            try await waitFor(apns, count: before + total, limit: .seconds(60))
            var latencies: [Int64] = []
            var received: [String: [Int64]] = [:]
            for request in apns.requests.dropFirst(before) {
                guard let token = request.path.split(separator: "/").last.map(String.init), let whisperId = tokens[token] else { continue }
                received[whisperId, default: []].append(request.receivedAt)
            }
            for (whisperId, times) in received {
                let created = sent[whisperId] ?? []
                for (index, time) in times.sorted().enumerated() where index < created.count {
                    latencies.append(time - created[index])
                }
            }
            latencies.sort()
            func percentile(_ p: Double) -> Int64 {
                latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))]
            }
            print("steady: \(total) wake-ups at \(rate)/s; job created -> APNs stand-in received: p50 \(percentile(0.5)) ms, p95 \(percentile(0.95)) ms, p99 \(percentile(0.99)) ms, max \(latencies.last ?? 0) ms")

            // Phase 2: a backlog, as fast as one push-sender goes.
            let cpuBefore = Self.cpuSeconds(process.processIdentifier)
            let backlogStart = apns.requestCount
            let began = ContinuousClock.now
            var queued = 0
            while queued < backlog {
                let count = min(1_000, backlog - queued)
                try await add((0..<count).map { job(to: ids[($0 + queued) % ids.count]) }, on: redis)
                queued += count
            }
            try await waitFor(apns, count: backlogStart + backlog, limit: .seconds(600))
            let elapsed = (ContinuousClock.now - began).seconds
            let cpu = (Self.cpuSeconds(process.processIdentifier) ?? 0) - (cpuBefore ?? 0)
            print(String(format: "backlog: %d wake-ups in %.2f s: %.0f wake-ups/s; push-sender CPU %.3f ms per wake-up", backlog, elapsed, Double(backlog) / elapsed, cpu * 1000 / Double(backlog)))
            print("connections the stand-in accepted in all: \(apns.connectionCount)")
        }
        await apns.stop()
    }

    func job(to whisperId: String) -> PushStream.Job {
        PushStream.Job(to: whisperId, kind: .message, id: RandomID.uuid(), at: Clock.millisecondsNow())
    }

    func add(_ jobs: [PushStream.Job], on redis: RedisClient) async throws {
        _ = try await redis.pipeline(jobs.map { RedisCommand("XADD", [PushStream.key, "*"] + $0.fields) })
    }

    func waitFor(_ server: FakeHTTP2Server, count: Int, limit: Duration) async throws {
        let deadline = ContinuousClock.now + limit
        while server.requestCount < count {
            guard ContinuousClock.now < deadline else {
                throw ValidationError("the stand-in got \(server.requestCount) of \(count) pushes within \(limit)")
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// User plus system CPU of a process so far, from /proc.
    static func cpuSeconds(_ pid: Int32) -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}

extension Duration {
    var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
