import Foundation
import NIOCore
import PostgresNIO
import Testing
import WhisperShared

@Suite struct MigrationTests {
    func withClient<T: Sendable>(_ settings: PostgresSettings, _ body: (PostgresClient) async throws -> T) async throws -> T {
        let client = PostgresClient(configuration: settings.clientConfiguration, backgroundLogger: TestServers.logger)
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            let result = try await body(client)
            group.cancelAll()
            return result
        }
    }

    @Test func migratingCreatesEveryTableAndRunningAgainDoesNothing() async throws {
        let database = try await TestDatabases.shared.make(migrated: false)
        defer { TestDatabases.shared.release(database) }
        try await withClient(database) { client in
            #expect(try await Migrator.currentVersion(client: client, logger: TestServers.logger) == nil)
            let first = try await Migrator().migrate(client: client, logger: TestServers.logger)
            #expect(first == Migrations.all.map(\.version))
            let second = try await Migrator().migrate(client: client, logger: TestServers.logger)
            #expect(second.isEmpty)
            #expect(try await Migrator.currentVersion(client: client, logger: TestServers.logger) == Migrations.latestVersion)

            var tables: Set<String> = []
            for try await name in try await client.query(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'", logger: TestServers.logger
            ).decode(String.self) {
                tables.insert(name)
            }
            let expected: Set<String> = [
                "users", "devices", "groups", "group_members", "bans", "reports", "audit_events",
                "attachments", "attachment_recipients", "contact_backups", "schema_migrations", "group_invitations", "live_conversations", "live_listeners", "ptt_channels", "ptt_members", "ptt_removed", "kt_leaves", "kt_nodes", "kt_log", "kt_epochs", "kt_keys", "kt_key_statements", "kt_audits", "deleted_identities",
                "live_profiles", "live_profile_devices", "live_profile_codes",
            ]
            #expect(tables == expected)
        }
    }

    @Test func concurrentMigratorsApplyEachMigrationOnce() async throws {
        let database = try await TestDatabases.shared.make(migrated: false)
        defer { TestDatabases.shared.release(database) }
        let results = try await withThrowingTaskGroup(of: [Int].self) { group in
            for _ in 0..<3 {
                group.addTask {
                    try await self.withClient(database) { client in
                        try await Migrator().migrate(client: client, logger: TestServers.logger)
                    }
                }
            }
            var all: [[Int]] = []
            for try await applied in group { all.append(applied) }
            return all
        }
        #expect(results.flatMap { $0 }.sorted() == Migrations.all.map(\.version))
        #expect(results.filter { !$0.isEmpty }.count == 1)
    }

    @Test func aChangedMigrationIsRefused() async throws {
        let database = try await TestDatabases.shared.make(migrated: true)
        defer { TestDatabases.shared.release(database) }
        try await withClient(database) { client in
            try await client.query("UPDATE schema_migrations SET checksum = 'edited' WHERE version = 1", logger: TestServers.logger)
            await #expect(throws: MigrationError.self) {
                try await Migrator().migrate(client: client, logger: TestServers.logger)
            }
        }
    }

    @Test func keysAndConstraintsHold() async throws {
        let database = try await TestDatabases.shared.make(migrated: true)
        defer { TestDatabases.shared.release(database) }
        try await withClient(database) { client in
            let logger = TestServers.logger
            // bytea binds from ByteBuffer ([UInt8] would bind as "char"[]).
            let key = ByteBuffer(repeating: 1, count: 32)
            let other = ByteBuffer(repeating: 2, count: 32)
            try await client.query("INSERT INTO users (whisper_id, enc_public_key, sign_public_key) VALUES ('WSP-AAAA-BBBB-CCCC', \(key), \(key))", logger: logger)
            // One signing key, one identity.
            await #expect(throws: PSQLError.self) {
                try await client.query("INSERT INTO users (whisper_id, enc_public_key, sign_public_key) VALUES ('WSP-AAAA-BBBB-DDDD', \(other), \(key))", logger: logger)
            }
            // Whisper IDs must have the frozen shape.
            await #expect(throws: PSQLError.self) {
                try await client.query("INSERT INTO users (whisper_id, enc_public_key, sign_public_key) VALUES ('nope', \(other), \(other))", logger: logger)
            }
            // Devices need a user; only one active device per user.
            await #expect(throws: PSQLError.self) {
                try await client.query("INSERT INTO devices (device_id, whisper_id, platform) VALUES (gen_random_uuid(), 'WSP-ZZZZ-ZZZZ-ZZZZ', 'ios')", logger: logger)
            }
            try await client.query("INSERT INTO devices (device_id, whisper_id, platform) VALUES (gen_random_uuid(), 'WSP-AAAA-BBBB-CCCC', 'ios')", logger: logger)
            await #expect(throws: PSQLError.self) {
                try await client.query("INSERT INTO devices (device_id, whisper_id, platform) VALUES (gen_random_uuid(), 'WSP-AAAA-BBBB-CCCC', 'android')", logger: logger)
            }
            // Contact backups go with their identity.
            try await client.query("INSERT INTO contact_backups (whisper_id, nonce_b64, ciphertext_b64, size_bytes) VALUES ('WSP-AAAA-BBBB-CCCC', 'n', 'c', 1)", logger: logger)
            try await client.query("DELETE FROM users WHERE whisper_id = 'WSP-AAAA-BBBB-CCCC'", logger: logger)
            let left = try await client.query("SELECT count(*) FROM contact_backups", logger: logger).decode(Int.self).first { _ in true }
            #expect(left == 0)
        }
    }
}
