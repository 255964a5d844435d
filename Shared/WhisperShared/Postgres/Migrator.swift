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

/// Applies `Migrations.all` in one transaction under `pg_advisory_xact_lock`, so several
/// processes may run it at once (one does the work), through PgBouncer's transaction mode
/// too; running it again is a no-op, and pending migrations apply together or not at all.
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
        let applied = try await client.withConnection { connection in
            try await locked(on: connection, logger: logger) {
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
                let known = Set(migrations.map(\.version))
                if let unknown = existing.keys.sorted().first(where: { !known.contains($0) }) {
                    throw MigrationError.unknownVersion(unknown)
                }
                var applied: [Migration] = []
                for migration in migrations.sorted(by: { $0.version < $1.version }) {
                    if try await apply(migration, recorded: existing[migration.version], on: connection, logger: logger) {
                        applied.append(migration)
                    }
                }
                return applied
            }
        }
        for migration in applied {
            logger.info("migration_applied", metadata: ["version": "\(migration.version)", "name": "\(migration.name)"])
        }
        return applied.map(\.version)
    }

    /// Runs `body` in a transaction holding the migration lock.
    private func locked<T>(on connection: PostgresConnection, logger: Logger, _ body: () async throws -> T) async throws -> T {
        _ = try await connection.query("BEGIN", logger: logger)
        do {
            _ = try await connection.query("SELECT pg_advisory_xact_lock(\(Self.lockKey))", logger: logger)
            let result = try await body()
            _ = try await connection.query("COMMIT", logger: logger)
            return result
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
    }

    /// Applies one migration unless it was applied before (`recorded`: its checksum as
    /// read under the lock); true when it was applied now.
    private func apply(_ migration: Migration, recorded: String?, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        let checksum = Self.checksum(of: migration)
        if let recorded {
            guard recorded == checksum else { throw MigrationError.checksumMismatch(version: migration.version) }
            return false
        }
        for statement in migration.statements {
            _ = try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
        }
        _ = try await connection.query(
            "INSERT INTO schema_migrations (version, name, checksum) VALUES (\(migration.version), \(migration.name), \(checksum))",
            logger: logger
        )
        return true
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
