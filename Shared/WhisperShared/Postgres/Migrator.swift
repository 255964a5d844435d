import Crypto
import Logging
import PostgresNIO

public enum MigrationError: Error, CustomStringConvertible, Sendable {
    /// An applied migration's text differs from the one this build carries.
    case checksumMismatch(version: Int)
    /// The database has a version this build does not know: an older build against a newer schema.
    case unknownVersion(Int)

    public var description: String {
        switch self {
        case .checksumMismatch(let version): "migration \(version) was applied with different SQL than this build carries"
        case .unknownVersion(let version): "database has migration \(version), which this build does not know"
        }
    }
}

/// Applies `Migrations.all` under a Postgres advisory lock, so that several processes
/// may run it at once and exactly one does the work. Running it again is a no-op.
public struct Migrator: Sendable {
    /// The advisory lock key ("whisper" in ASCII, as a number).
    static let lockKey: Int64 = 0x77_6869_7370_6572
    public let migrations: [Migration]

    public init(migrations: [Migration] = Migrations.all) {
        self.migrations = migrations
    }

    /// Brings the schema up to date; returns the versions it applied.
    @discardableResult
    public func migrate(client: PostgresClient, logger: Logger) async throws -> [Int] {
        try await client.withConnection { connection in
            _ = try await connection.query("SELECT pg_advisory_lock(\(Self.lockKey))", logger: logger)
            do {
                let applied = try await apply(on: connection, logger: logger)
                _ = try await connection.query("SELECT pg_advisory_unlock(\(Self.lockKey))", logger: logger)
                return applied
            } catch {
                _ = try? await connection.query("ROLLBACK", logger: logger)
                _ = try? await connection.query("SELECT pg_advisory_unlock(\(Self.lockKey))", logger: logger)
                throw error
            }
        }
    }

    private func apply(on connection: PostgresConnection, logger: Logger) async throws -> [Int] {
        _ = try await connection.query(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version    integer PRIMARY KEY,
                name       text NOT NULL,
                checksum   text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            logger: logger
        )
        var existing: [Int: String] = [:]
        for try await (version, checksum) in try await connection.query(
            "SELECT version, checksum FROM schema_migrations", logger: logger
        ).decode((Int, String).self) {
            existing[version] = checksum
        }
        let known = Dictionary(uniqueKeysWithValues: migrations.map { ($0.version, $0) })
        if let unknown = existing.keys.sorted().first(where: { known[$0] == nil }) {
            throw MigrationError.unknownVersion(unknown)
        }
        var applied: [Int] = []
        for migration in migrations.sorted(by: { $0.version < $1.version }) {
            let checksum = Self.checksum(of: migration)
            if let recorded = existing[migration.version] {
                guard recorded == checksum else { throw MigrationError.checksumMismatch(version: migration.version) }
                continue
            }
            _ = try await connection.query("BEGIN", logger: logger)
            for statement in migration.statements {
                _ = try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
            _ = try await connection.query(
                "INSERT INTO schema_migrations (version, name, checksum) VALUES (\(migration.version), \(migration.name), \(checksum))",
                logger: logger
            )
            _ = try await connection.query("COMMIT", logger: logger)
            logger.info("migration_applied", metadata: ["version": "\(migration.version)", "name": "\(migration.name)"])
            applied.append(migration.version)
        }
        return applied
    }

    static func checksum(of migration: Migration) -> String {
        let digest = SHA256.hash(data: Array(migration.statements.joined(separator: "\n;\n").utf8))
        return digest.hexString
    }

    /// The highest applied version, or nil when the database has never been migrated.
    public static func currentVersion(client: PostgresClient, logger: Logger) async throws -> Int? {
        let exists = try await client.query(
            "SELECT to_regclass('schema_migrations') IS NOT NULL", logger: logger
        ).decode(Bool.self).first(where: { _ in true }) ?? false
        guard exists else { return nil }
        return try await client.query(
            "SELECT max(version) FROM schema_migrations", logger: logger
        ).decode(Int?.self).first(where: { _ in true }) ?? nil
    }
}
