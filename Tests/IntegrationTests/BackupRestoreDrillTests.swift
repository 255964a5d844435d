import Foundation
import NIOHTTP1
import PostgresNIO
import Testing
import WhisperClient
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
        let (database, users, group) = try await MessagingStack.start(routers: 1).running { before in
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
            return (before.database, users, group)
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
}
