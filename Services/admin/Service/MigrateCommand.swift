import Logging
import PostgresNIO
import WhisperShared

/// `admin migrate`: applies the schema migrations and exits. Safe to run from several
/// places at once (an advisory lock serialises them) and to run again (a no-op).
public enum MigrateCommand {
    public static func run(settings: AdminSettings, logger: Logger) async throws -> [Int] {
        let client = PostgresClient(configuration: settings.common.postgres.clientConfiguration, backgroundLogger: logger)
        return try await withThrowingTaskGroup(of: [Int]?.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            let applied = try await Migrator().migrate(client: client, logger: logger)
            group.cancelAll()
            return applied
        }
    }
}
