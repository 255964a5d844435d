import Foundation
import PostgresNIO
import Testing
import WhisperClient
import WhisperShared

/// The services' queries through Debian's PgBouncer in transaction mode (scripts/test
/// starts it in front of the test Postgres), where consecutive transactions of one client
/// connection may run on different server connections: migrations, registration, the
/// identity lookups of a message, receipts, and a group's transactions.
@Suite struct PgBouncerTests {
    /// The same database, reached through PgBouncer.
    private static func throughPgBouncer(_ database: PostgresSettings) throws -> PostgresSettings {
        let port = try #require(TestServers.environment["WHISPER_TEST_PGBOUNCER_PORT"].flatMap(Int.init), "scripts/test starts PgBouncer")
        var settings = database
        settings.port = port
        return settings
    }

    @Test func migrationsRunAtOnceFromTwoProcessesApplyEachVersionOnce() async throws {
        let database = try Self.throughPgBouncer(try await TestDatabases.shared.make(migrated: false))
        defer { TestDatabases.shared.release(database) }
        let clients = (0..<2).map { _ in PostgresClient(configuration: database.clientConfiguration, backgroundLogger: TestServers.logger) }
        let applied = try await withThrowingTaskGroup(of: [Int]?.self) { group in
            for client in clients { group.addTask { await client.run(); return nil } }
            var applied: [[Int]] = []
            try await withThrowingTaskGroup(of: [Int].self) { migrations in
                for client in clients { migrations.addTask { try await Migrator().migrate(client: client, logger: TestServers.logger) } }
                for try await versions in migrations { applied.append(versions) }
            }
            #expect(try await Migrator.currentVersion(client: clients[0], logger: TestServers.logger) == Migrations.latestVersion)
            // Again: nothing to do.
            #expect(try await Migrator().migrate(client: clients[1], logger: TestServers.logger) == [])
            group.cancelAll()
            return applied
        }
        #expect(applied.flatMap { $0 }.sorted() == Migrations.all.map(\.version).sorted(), "each version applied once, by one of them")
    }

    @Test func messagesReceiptsAndGroupsWorkThroughIt() async throws {
        let database = try Self.throughPgBouncer(try await TestDatabases.shared.make())
        defer { TestDatabases.shared.release(database) }
        try await MessagingStack.start(routers: 1, database: database).running { stack in
            // Registration (auth's transactions), a message (identity look-ups), its receipt.
            let owner = try await stack.user(on: 0)
            let members = [try await stack.user(on: 0), try await stack.user(on: 0)]
            let (message, received) = try await owner.sendAndWaitForArrival("through the pooler", to: members[0])
            try await members[0].connection.acknowledge(received)
            let receipt = try #require(try await owner.events(.messageDelivered).first?.payload(as: MessageDelivered.self))
            #expect(receipt.messageId == message.messageId)

            // A group's creation and change are transactions with row locks (the router's).
            try await stack.makePeers([owner] + members)
            let created = try await owner.connection.createGroup(title: "Pooled", memberIds: [members[0].whisperId])
            #expect(created.memberIds == [owner.whisperId, members[0].whisperId])
            let updated = try await owner.connection.updateGroup(created.groupId, add: [members[1].whisperId], title: "Pooled, renamed")
            #expect(updated.memberIds == [owner.whisperId, members[0].whisperId, members[1].whisperId])
            #expect(updated.title == "Pooled, renamed")
            let copies = owner.groupCopies("to the pooled group", groupId: created.groupId, to: members)
            let outcomes = await owner.connection.sendGroup(copies)
            #expect(outcomes.values.allSatisfy { (try? $0.get()) != nil })
            // members[0] has the 1:1 message first.
            for (member, count) in zip(members, [2, 1]) {
                let arrived = try await member.events(.messageReceived, count: count).compactMap { $0.payload(as: MessageReceived.self) }
                #expect(arrived.contains { $0.groupId == created.groupId })
            }
        }
    }
}
