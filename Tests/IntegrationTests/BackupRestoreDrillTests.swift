import Foundation
import GCWorkerService
import NIOHTTP1
import PostgresNIO
import Testing
import WhisperClient
import WhisperMessaging
import WhisperShared

/// The disaster drill of docs/operations.md ("Backups", "Restore"): fill a deployment
/// through its API, back Postgres up with `pg_dump`, lose everything (the database
/// dropped, Redis gone), restore the dump into a new server, and the same people, with
/// only their seed phrases, get their Whisper IDs, their groups and their contacts
/// backups back.
@Suite struct BackupRestoreDrillTests {
    /// Runs a PostgreSQL client program (`pg_dump`, `pg_restore`) of the local server.
    static func run(_ program: String, _ arguments: [String]) throws {
        let bin = try #require(
            (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql"))?.sorted().last.map { "/usr/lib/postgresql/\($0)/bin" }
        )
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "\(bin)/\(program)")
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw TestSetupError("\(program) failed: \(text)") }
    }

    static func admin(_ sql: String) async throws {
        let settings = try #require(PostgresSettings(url: TestServers.postgresURL))
        let client = PostgresClient(configuration: settings.clientConfiguration, backgroundLogger: TestServers.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            try await client.query(PostgresQuery(unsafeSQL: sql), logger: TestServers.logger)
            group.cancelAll()
        }
    }

    @Test func aDumpRestoredIntoAnEmptyServerGivesEveryoneTheirIdentityGroupsAndBackupBack() async throws {
        let mnemonics = (0..<3).map { _ in BIP39.generateMnemonic() }
        func register(_ mnemonic: String, on stack: MessagingStack, gateway: Int) async throws -> TestUser {
            let keys = try WhisperKeys(mnemonic: mnemonic)
            let connection = WhisperConnection(url: "ws://127.0.0.1:\(stack.gateways[gateway].port)/ws", logger: TestServers.logger)
            try await connection.connect()
            let ack = try await connection.register(keys: keys, deviceId: RandomID.uuid(), platform: .android)
            return TestUser(whisperId: ack.whisperId, keys: keys, token: ack.sessionToken, connection: connection, events: EventLog(connection))
        }

        // 1. A deployment in use, stopped at the end of its block.
        // The drill's own database: it outlives the first stack, dropped and restored.
        let database = try await TestDatabases.shared.make()
        defer { TestDatabases.shared.release(database) }
        let (users, group) = try await MessagingStack.start(routers: 1, database: database).running { before in
            var users: [TestUser] = []
            for (index, mnemonic) in mnemonics.enumerated() { users.append(try await register(mnemonic, on: before, gateway: index % 2)) }
            let (alice, bob, carol) = (users[0], users[1], users[2])
            try await before.makePeers([alice, bob, carol])
            let group = try await alice.connection.createGroup(title: "Drill", memberIds: [bob.whisperId, carol.whisperId])
            let contacts = ContactsBackup(contacts: [
                .init(whisperId: bob.whisperId, addedAt: 1_767_268_800_000, displayName: "Bob"),
                .init(whisperId: carol.whisperId, addedAt: 1_767_268_900_000, displayName: "Carol", isPinned: true),
            ])
            let stored = try await HTTP.json(.PUT, "\(before.auth.baseURL)/backup/contacts", token: alice.token, body: try contacts.sealed(with: alice.keys))
            #expect(stored.status == 200)
            for user in users { await user.connection.close() }
            return (users, group)
        }
        let (bob, carol) = (users[1], users[2])

        // 2. The backup, then the disaster: the database dropped, Redis gone with the stack.
        let dump = FileManager.default.temporaryDirectory.appendingPathComponent("whisper-drill-\(UUID().uuidString).dump")
        defer { try? FileManager.default.removeItem(at: dump) }
        let url = "postgres://\(database.username)@\(database.host):\(database.port)/\(database.database)"
        try Self.run("pg_dump", ["--format=custom", "--no-owner", "--file=\(dump.path)", url])
        try await Self.admin("DROP DATABASE \(database.database) WITH (FORCE)")
        try await Self.admin("CREATE DATABASE \(database.database)")
        try Self.run("pg_restore", ["--no-owner", "--exit-on-error", "--dbname=\(url)", dump.path])

        // 3. A new deployment on the restored database and an empty Redis.
        try await MessagingStack.start(routers: 1, database: database).running { after in
            var back: [TestUser] = []
            for (index, mnemonic) in mnemonics.enumerated() { back.append(try await register(mnemonic, on: after, gateway: (index + 1) % 2)) }
            #expect(back.map(\.whisperId) == users.map(\.whisperId))
            // The contacts backup opens with the phrase-derived key.
            let fetched = try await HTTP.json(.GET, "\(after.auth.baseURL)/backup/contacts", token: back[0].token)
            #expect(fetched.status == 200)
            let opened = try ContactsBackup.open(
                nonce: try #require(fetched.json["nonce"] as? String), ciphertext: try #require(fetched.json["ciphertext"] as? String), with: back[0].keys
            )
            #expect(opened.contacts.map(\.whisperId) == [bob.whisperId, carol.whisperId])
            // The group is there: a message to it reaches both members.
            let copies = MessageCrypto.makeGroupCopies(
                Array("after the restore".utf8), groupId: group.groupId, from: (back[0].whisperId, back[0].keys),
                to: [back[1].peerKeys, back[2].peerKeys], sessionToken: back[0].token
            )
            let outcomes = await back[0].connection.sendGroup(copies)
            #expect(outcomes.values.allSatisfy { (try? $0.get()) != nil })
            for member in [back[1], back[2]] {
                let received = try #require(try await member.events(.messageReceived).first?.payload(as: MessageReceived.self))
                #expect(received.groupId == group.groupId)
                #expect(String(decoding: try MessageCrypto.open(received, by: (member.whisperId, member.keys), sender: back[0].peerKeys), as: UTF8.self) == "after the restore")
            }
        }
    }

    /// The journal names nobody: each object is named by a keyed hash and sealed; an
    /// object of the first format (the ID in the clear) and every object under an older
    /// key are rewritten under the first key by a walk, after which the older key can go;
    /// a gc-worker holding none of the keys opens nothing and counts what it cannot read.
    @Test func theJournalNamesNobodyAndMovesToANewKey() async throws {
        let moto = try MotoProcess()
        defer { moto.stop() }
        let store = try await moto.client()
        try await MessagingStack.start(routers: 1).running { stack in
            let users = [try await stack.user(on: 0), try await stack.user(on: 1), try await stack.user(on: 0)]
            for user in users { _ = try await user.connection.deleteAccount(keys: user.keys) }
            let ids = users.map(\.whisperId)
            let (a, b, c) = ((0..<32).map { UInt8($0) }, (0..<32).map { UInt8(100 + $0) }, (0..<32).map { UInt8(200 - $0) })
            let first = JournalKeys(secrets: [a]), rotated = JournalKeys(secrets: [b, a]), newOnly = JournalKeys(secrets: [b]), neither = JournalKeys(secrets: [c])
            func journal<T: Sendable>(_ keys: JournalKeys, _ body: @Sendable (DeletionJournal) async throws -> T) async throws -> T {
                try await stack.withPostgres { postgres in
                    try await stack.withRedis { redis in
                        try await body(DeletionJournal(postgres: postgres, redis: redis, store: store, keys: keys, instanceID: "gc-test", logger: TestServers.logger))
                    }
                }
            }
            func names() async throws -> Set<String> { Set(try await store.list(prefix: DeletionJournal.prefix).keys) }

            // 1. Written under the first key: named by it, nothing in a name or a body names anyone.
            //    A copy the store refused waits for the next pass, as gc-worker's loop runs them.
            var written = 0
            try await waitUntil {
                written += try await journal(first) { try await $0.write() }
                return written >= 3
            }
            #expect(written == 3)
            #expect(try await names() == Set(ids.map { first.first.name(of: $0) }))
            for name in try await names() {
                let body = try #require(try await store.get(name))
                #expect(!ids.contains { String(decoding: body, as: UTF8.self).contains($0) || name.contains($0) })
            }
            // 2. The third as the first format kept it: the record in the clear under the ID.
            let third = first.first.name(of: ids[2])
            let sealed = try #require(try await store.get(third))
            let record = try #require(first.first.open(sealed, name: third))
            try await store.delete(third)
            try await store.put(DeletionJournal.prefix + ids[2], body: Array(try JSONEncoder().encode(record)), contentType: "application/json")

            // 3. A new key first, the old one kept: one walk rewrites every object under the new one.
            let walked = try await journal(rotated) { try await $0.reapply() }
            #expect(walked.checked == 3 && walked.rewritten == 3 && walked.unreadable == 0 && walked.routed + walked.recorded + walked.skipped == 0)
            #expect(try await names() == Set(ids.map { newOnly.first.name(of: $0) }))
            let recorded = try await stack.withPostgres { client in
                var names: Set<String> = []
                let rows = try await client.query("SELECT journal_name FROM deleted_identities WHERE whisper_id = ANY(\(ids)::text[])", logger: TestServers.logger)
                for try await name in rows.decode(String?.self) { if let name { names.insert(name) } }
                return names
            }
            #expect(recorded == Set(ids.map { newOnly.first.name(of: $0) }), "each row names its object")

            // 4. The old key dropped: every object still opens, and a walk has nothing to do.
            let again = try await journal(newOnly) { try await $0.reapply() }
            #expect(again.checked == 3 && again.rewritten == 0 && again.unreadable == 0)
            // 5. A gc-worker holding neither key opens nothing, and says so.
            #expect(try await journal(neither) { try await $0.reapply() }.unreadable == 3)
        }
    }

    /// Deletions made after the dump a database is restored from come back from the
    /// journal (docs/operations.md, "Deletions and restores"): an identity in the dump is
    /// deleted again through the router (its group passes on, its ID answers `NOT_FOUND`,
    /// its keys register only as a new identity), one that registered after the dump is
    /// recorded as deleted again, and a record the owner did not sign deletes nothing.
    @Test func deletionsMadeAfterTheDumpAreAppliedAgainFromTheJournal() async throws {
        let moto = try MotoProcess()
        defer { moto.stop() }
        let store = try await moto.client()
        func gcWorker(_ stack: MessagingStack) async throws -> RunningService {
            var settings = GCWorkerSettings(
                common: TestServers.common(service: "gc-worker", postgres: stack.database, redis: stack.redis), s3: moto.settings,
                directorySigner: TestServers.directorySigner, journalKeys: TestServers.journalKeys, interval: .seconds(3_600)
            )
            settings.journalInterval = .seconds(1)
            let final = settings
            return try await RunningService.start { running in buildGCWorker(settings: final, logger: TestServers.logger, onServerRunning: running).assembly }
        }
        func journaled(_ whisperId: String) async throws -> DeletionJournal.Record? {
            let name = TestServers.journalKeys.first.name(of: whisperId)
            return try await store.get(name).flatMap { TestServers.journalKeys.first.open($0, name: name) }
        }
        func isRegistered(_ whisperId: String, on stack: MessagingStack) async throws -> Bool {
            try await stack.withPostgres { client in
                try await client.query("SELECT count(*) FROM users WHERE whisper_id = \(whisperId)", logger: TestServers.logger).decode(Int64.self).first { _ in true } == 1
            }
        }
        func isRecordedDeleted(_ whisperId: String, on stack: MessagingStack) async throws -> Bool {
            try await stack.withPostgres { client in
                try await client.query("SELECT count(*) FROM deleted_identities WHERE whisper_id = \(whisperId)", logger: TestServers.logger).decode(Int64.self).first { _ in true } == 1
            }
        }
        let dump = FileManager.default.temporaryDirectory.appendingPathComponent("whisper-journal-\(UUID().uuidString).dump")
        defer { try? FileManager.default.removeItem(at: dump) }

        // 1. Alice owns a group of three; the dump is taken; then she deletes her account,
        //    and Dave, who registered after the dump, deletes his. The journal has both.
        let database = try await TestDatabases.shared.make()
        defer { TestDatabases.shared.release(database) }
        let (alice, bob, carol, dave, group) = try await MessagingStack.start(routers: 1, database: database).running { before in
            let alice = try await before.user(on: 0), bob = try await before.user(on: 1), carol = try await before.user(on: 0)
            try await before.makePeers([alice, bob, carol])
            let group = try await alice.connection.createGroup(title: "Drill", memberIds: [bob.whisperId, carol.whisperId])
            let url = "postgres://\(before.database.username)@\(before.database.host):\(before.database.port)/\(before.database.database)"
            try Self.run("pg_dump", ["--format=custom", "--no-owner", "--file=\(dump.path)", url])
            let dave = try await before.user(on: 1)
            for user in [alice, dave] { _ = try await user.connection.deleteAccount(keys: user.keys) }
            try await gcWorker(before).running { _ in
                try await waitUntil {
                    let (first, second) = (try await journaled(alice.whisperId), try await journaled(dave.whisperId))
                    return first != nil && second != nil
                }
            }
            // The record holds her own signed request.
            let request = try #require(try await journaled(alice.whisperId)?.request)
            #expect(request.whisperId == alice.whisperId)
            #expect(Ed25519.verify(signature: Array(try #require(Data(base64Encoded: request.signature))), message: request.signedBytes, publicKey: alice.keys.signPublicKey))
            for user in [alice, bob, carol, dave] { await user.connection.close() }
            return (alice, bob, carol, dave, group)
        }
        // A record of a deletion Carol never signed (another key's signature), as whoever
        // could write to the store might add, in the journal's first format (the record in
        // the clear, named by the ID), which a walk still reads.
        let forged = try WhisperKeys(mnemonic: BIP39.generateMnemonic()).accountDeletion(whisperId: carol.whisperId)
        try await store.put(
            DeletionJournal.prefix + carol.whisperId,
            body: Array(try JSONEncoder().encode(DeletionJournal.Record(whisperId: carol.whisperId, deletedAt: Clock.millisecondsNow(), request: forged))),
            contentType: "application/json"
        )

        // 2. The database restored from the dump: Alice is back, Dave unknown.
        let url = "postgres://\(database.username)@\(database.host):\(database.port)/\(database.database)"
        try await Self.admin("DROP DATABASE \(database.database) WITH (FORCE)")
        try await Self.admin("CREATE DATABASE \(database.database)")
        try Self.run("pg_restore", ["--no-owner", "--exit-on-error", "--dbname=\(url)", dump.path])
        try await MessagingStack.start(routers: 1, database: database).running { after in
            #expect(try await isRegistered(alice.whisperId, on: after), "the dump brought alice back")
            #expect(try await !isRecordedDeleted(dave.whisperId, on: after))

            // 3. gc-worker starts and applies the journal.
            try await gcWorker(after).running { worker in
                try await waitUntil(timeout: .seconds(30)) {
                    let (first, second) = (try await isRecordedDeleted(alice.whisperId, on: after), try await isRecordedDeleted(dave.whisperId, on: after))
                    return first && second
                }
                // Carol's forged record went to the router, which refused it.
                try await waitUntil {
                    Metrics.value(in: try await after.metricsText(of: after.routers), "whisper_errors_total", ["code": "AUTH_FAILED"]) == 1
                }
            }
            #expect(try await !isRegistered(alice.whisperId, on: after))
            #expect(try await isRegistered(carol.whisperId, on: after), "a deletion its owner did not sign is not applied")
            // The object of the first format was rewritten: no name in the bucket is an ID.
            let names = try await store.list(prefix: DeletionJournal.prefix).keys
            #expect(names.count == 3 && !names.contains { $0.contains("WSP-") }, "\(names)")
            #expect(try await !isRecordedDeleted(carol.whisperId, on: after))
            // Alice left her group as a member leaving would: it passed to Bob, who joined first.
            let members = try await after.withPostgres { client in
                var members: [String: String] = [:]
                let rows = try await client.query("SELECT whisper_id, role FROM group_members WHERE group_id = \(group.groupId)", logger: TestServers.logger)
                for try await (member, role) in rows.decode((String, String).self) { members[member] = role }
                return members
            }
            #expect(members == [bob.whisperId: "owner", carol.whisperId: "member"])
            // Her keys and Dave's register only as new identities.
            for user in [alice, dave] {
                let again = WhisperConnection(url: "ws://127.0.0.1:\(after.gateways[0].port)/ws", logger: TestServers.logger)
                try await again.connect()
                let ack = try await again.register(keys: user.keys, deviceId: RandomID.uuid(), platform: .android)
                #expect(ack.whisperId != user.whisperId)
                await again.close()
            }
        }
    }
}
