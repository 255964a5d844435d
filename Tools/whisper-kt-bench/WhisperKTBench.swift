import ArgumentParser
import Foundation
import Logging
import NIOCore
import PostgresNIO
import WhisperProtocol
import WhisperShared

/// Measures the key directory at size (docs/benchmarks.md, "Key directory"): publish time,
/// proof sizes, client verify time, lookups at a steady rate and storage per identity, on
/// the PostgreSQL `scripts/bench --directory` gives it.
@main
struct WhisperKTBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "whisper-kt-bench")

    @Option(help: "Identities in the directory.")
    var identities = 1_000_000

    @Option(help: "Identities per epoch while filling.")
    var batch = 20_000

    @Option(help: "Lookups a second in the lookup phase.")
    var rate = 1_000

    @Option(help: "Seconds of the lookup phase.")
    var duration = 30

    @Option(help: "Small epochs timed at full size (each with --small-epoch new identities).")
    var smallEpochs = 20

    @Option(help: "New identities in each small epoch.")
    var smallEpoch = 10

    @Flag(help: "Measure the directory an earlier run left (proofs, lookups, storage), without filling or publishing.")
    var existing = false

    func run() async throws {
        var logger = Logger(label: "whisper-kt-bench")
        logger.logLevel = .warning
        guard let url = ProcessInfo.processInfo.environment["WHISPER_POSTGRES_URL"], let settings = PostgresSettings(url: url) else {
            throw ValidationError("WHISPER_POSTGRES_URL is not set")
        }
        var configuration = settings.clientConfiguration
        configuration.options.maximumConnections = 40
        let postgres = PostgresClient(configuration: configuration, backgroundLogger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await postgres.run() }
            defer { group.cancelAll() }
            try await measure(postgres, logger: logger)
        }
    }

    func measure(_ postgres: PostgresClient, logger: Logger) async throws {
        let store = DirectoryStore(postgres: postgres, logger: logger)
        var ids: [String] = []
        if existing {
            for try await id in try await postgres.query("SELECT whisper_id FROM users WHERE kt_epoch IS NOT NULL", logger: logger).decode(String.self) {
                ids.append(id)
            }
            print("an existing directory of \(ids.count) identities")
        } else {
            try await fill(&ids, postgres, logger: logger)
        }
        guard let keys = try await store.keys() else { throw ValidationError("no directory keys") }

        try await measureLookups(ids, store: store, keys: keys, postgres, logger: logger)
    }

    func fill(_ ids: inout [String], _ postgres: PostgresClient, logger: Logger) async throws {
        let signer = DirectorySigner(vrfSeed: SecureBytes.random(32), signingSeeds: [SecureBytes.random(32)])
        let publisher = DirectoryPublisher(postgres: postgres, signer: signer, batchSize: batch, headMaxAge: .seconds(86_400), logger: logger)
        try await publisher.recordKeys()
        // Filling: identities inserted as registration does, published epoch by epoch.
        ids.reserveCapacity(identities)
        let fillStart = ContinuousClock.now
        var bulkEpochs: [Double] = []
        while ids.count < identities {
            let count = min(batch, identities - ids.count)
            let fresh = try await insert(count, into: postgres, logger: logger)
            ids += fresh
            let start = ContinuousClock.now
            guard try await publisher.publish() != nil else { throw ValidationError("nothing published") }
            bulkEpochs.append((ContinuousClock.now - start).seconds)
            if ids.count % 100_000 < batch { print("filled \(ids.count) identities, last epoch of \(count) in \(format(bulkEpochs.last!)) s") }
        }
        let fillSeconds = (ContinuousClock.now - fillStart).seconds
        print("filling: \(ids.count) identities in \(bulkEpochs.count) epochs, \(format(fillSeconds)) s in all; an epoch of \(batch): median \(format(median(bulkEpochs))) s")

        // Small epochs at full size: what publishing every few seconds costs.
        var small: [Double] = []
        for _ in 0..<smallEpochs {
            ids += try await insert(smallEpoch, into: postgres, logger: logger)
            let start = ContinuousClock.now
            guard try await publisher.publish() != nil else { throw ValidationError("nothing published") }
            small.append((ContinuousClock.now - start).seconds * 1_000)
        }
        small.sort()
        print("epoch publish at \(ids.count) identities, \(smallEpoch) new each: p50 \(format(percentile(small, 0.5))) ms, max \(format(small.last!)) ms")
    }

    func measureLookups(_ ids: [String], store: DirectoryStore, keys: DirectoryKeys, _ postgres: PostgresClient, logger: Logger) async throws {
        // Proof size and the client's verify time.
        var sizes: [Int] = [], siblings: [Int] = []
        var verifySeconds = 0.0
        let sample = 1_000
        for _ in 0..<sample {
            let id = ids.randomElement()!
            guard case .proven(let proof) = try await store.lookup(whisperId: id, since: nil) else { throw ValidationError("\(id) not proven") }
            sizes.append(try JSONEncoder().encode(proof).count)
            siblings.append(proof.siblings.count)
            let state = try await stateOf(id, postgres, logger: logger)
            let start = ContinuousClock.now
            _ = try proof.verify(whisperId: id, state: state, keys: keys, held: nil)
            verifySeconds += (ContinuousClock.now - start).seconds
        }
        sizes.sort()
        siblings.sort()
        print("proof: \(format(Double(sizes.reduce(0, +)) / Double(sample), 0)) bytes of JSON on average (max \(sizes.last!)), \(format(Double(siblings.reduce(0, +)) / Double(sample), 1)) siblings (max \(siblings.last!))")
        print("client verify: \(format(verifySeconds / Double(sample) * 1_000, 3)) ms per proof (signature, VRF, commitment, path)")

        // Lookups with proofs at a steady rate.
        var latencies: [Double] = []
        let total = rate * duration
        let interval = Duration.seconds(1) / rate
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Double.self) { group in
            for index in 0..<total {
                let due = start + interval * index
                let now = ContinuousClock.now
                if due > now { try await Task.sleep(for: due - now) }
                let id = ids.randomElement()!
                group.addTask {
                    let began = ContinuousClock.now
                    let lookup = try await store.lookup(whisperId: id, since: nil)
                    guard case .proven(let proof) = lookup else { throw ValidationError("\(id) not proven") }
                    _ = try JSONEncoder().encode(proof)
                    return (ContinuousClock.now - began).seconds * 1_000
                }
            }
            for try await ms in group { latencies.append(ms) }
        }
        let elapsed = (ContinuousClock.now - start).seconds
        latencies.sort()
        print("lookups with proofs: \(latencies.count) in \(format(elapsed)) s (\(format(Double(latencies.count) / elapsed, 0))/s), p50 \(format(percentile(latencies, 0.5), 2)) ms, p99 \(format(percentile(latencies, 0.99), 2)) ms, max \(format(latencies.last!, 2)) ms")

        // Storage.
        let rows = try await postgres.query(
            """
            SELECT sum(pg_total_relation_size(t))::bigint, (SELECT pg_total_relation_size('kt_epochs'))::bigint
            FROM unnest(ARRAY['kt_leaves', 'kt_nodes', 'kt_log', 'kt_epochs']::regclass[]) AS t
            """,
            logger: logger
        )
        for try await (all, epochs) in rows.decode((Int64, Int64).self) {
            print("storage: \(format(Double(all) / Double(ids.count), 0)) bytes per identity in the kt_ tables (\(format(Double(all - epochs) / Double(ids.count), 0)) without the stored update proofs)")
        }
    }

    func insert(_ count: Int, into postgres: PostgresClient, logger: Logger) async throws -> [String] {
        let ids = (0..<count).map { _ in WhisperID.generate() }
        let enc = ids.map { _ in ByteBuffer(bytes: SecureBytes.random(32)) }
        let sign = ids.map { _ in ByteBuffer(bytes: SecureBytes.random(32)) }
        _ = try await postgres.query(
            """
            INSERT INTO users (whisper_id, enc_public_key, sign_public_key)
            SELECT * FROM unnest(\(ids)::text[], \(enc)::bytea[], \(sign)::bytea[]) ON CONFLICT DO NOTHING
            """,
            logger: logger
        )
        return ids
    }

    func stateOf(_ id: String, _ postgres: PostgresClient, logger: Logger) async throws -> KeyDirectory.KeyState {
        let rows = try await postgres.query("SELECT enc_public_key, sign_public_key FROM users WHERE whisper_id = \(id)", logger: logger)
        for try await (enc, sign) in rows.decode((ByteBuffer, ByteBuffer).self) {
            return .active(encPublicKey: Array(enc.readableBytesView), signPublicKey: Array(sign.readableBytesView))
        }
        throw ValidationError("no such identity")
    }
}

func median(_ values: [Double]) -> Double { percentile(values.sorted(), 0.5) }

func percentile(_ sorted: [Double], _ p: Double) -> Double {
    guard !sorted.isEmpty else { return 0 }
    return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

func format(_ value: Double, _ digits: Int = 1) -> String { String(format: "%.\(digits)f", value) }

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
