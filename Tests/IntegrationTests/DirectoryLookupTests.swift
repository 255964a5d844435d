import Foundation
import Logging
import NIOCore
import PostgresNIO
import Testing
import WhisperProtocol
@testable import WhisperShared

/// `DirectoryStore.lookup` against a directory published in Postgres: the proofs it
/// assembles from its in-memory copy of the tree's top levels and the nodes it reads
/// below them verify, also after epochs that change and deepen the tree.
@Suite struct DirectoryLookupTests {
    let logger = TestServers.logger

    @Test func proofsJoiningTheKeptTopLevelsAndTheReadNodesVerifyAcrossEpochs() async throws {
        let database = try await TestDatabases.shared.make(migrated: true)
        defer { TestDatabases.shared.release(database) }
        let postgres = PostgresClient(configuration: database.clientConfiguration, backgroundLogger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await postgres.run() }
            defer { group.cancelAll() }
            let publisher = DirectoryPublisher(
                postgres: postgres, signer: TestServers.directorySigner, batchSize: 5_000, headMaxAge: .seconds(3_600), logger: logger
            )
            try await publisher.recordKeys()
            // Two levels in memory: a tree of a few hundred leaves is some eight deep, so
            // every path is part copy, part read.
            let store = DirectoryStore(postgres: postgres, logger: logger, topLevels: 2)
            let fresh = DirectoryStore(postgres: postgres, logger: logger, topLevels: 2)
            var states: [String: KeyDirectory.KeyState] = [:]
            var held: DirectoryHead?
            for round in 0..<3 {
                states.merge(try await insert(150, into: postgres)) { $1 }
                guard let head = try await publisher.publish()?.head else { Issue.record("round \(round) published nothing"); return }
                guard let keys = try await store.keys() else { Issue.record("no directory keys"); return }
                // `store` keeps the last round's copy, `fresh` reads one now: both prove
                // every identity in the new head.
                for (whisperId, state) in states {
                    for reader in [store, fresh] {
                        guard case .proven(let proof) = try await reader.lookup(whisperId: whisperId, since: held?.epoch) else {
                            Issue.record("\(whisperId) is not proven in round \(round)")
                            return
                        }
                        #expect(proof.head == head)
                        #expect(throws: Never.self) { _ = try proof.verify(whisperId: whisperId, state: state, keys: keys, held: held) }
                    }
                }
                held = head
            }
            let depth = try await postgres.query("SELECT depth FROM kt_epochs ORDER BY epoch DESC LIMIT 1", logger: logger)
                .decode(Int16.self).first { _ in true }
            #expect((depth ?? 0) > 2, "the tree must reach below the kept levels for this test to mean anything")
        }
    }

    /// `count` identities with random keys, as registration inserts them, and their key states.
    private func insert(_ count: Int, into postgres: PostgresClient) async throws -> [String: KeyDirectory.KeyState] {
        var states: [String: KeyDirectory.KeyState] = [:]
        for _ in 0..<count {
            let id = WhisperID.generate(), enc = SecureBytes.random(32), sign = SecureBytes.random(32)
            try await postgres.query(
                "INSERT INTO users (whisper_id, enc_public_key, sign_public_key) VALUES (\(id), \(ByteBuffer(bytes: enc)), \(ByteBuffer(bytes: sign)))",
                logger: logger
            )
            states[id] = .active(encPublicKey: enc, signPublicKey: sign)
        }
        return states
    }
}
