import AdminService
import Foundation
import Logging
import WhisperShared

ServiceMain.useEventLoopsForConcurrency()

if CommandLine.arguments.dropFirst().first == "migrate" {
    let reader = SettingsReader.environment()
    let settings = AdminSettings(from: reader)
    let level = settings.common.logLevel
    LoggingSystem.bootstrap { JSONLogHandler(label: $0, service: "admin", level: level) }
    let logger = Logger(label: "admin")
    do {
        try reader.validate()
        let applied = try await MigrateCommand.run(settings: settings, logger: logger)
        logger.info("migrate_done", metadata: ["applied": "\(applied)", "schemaVersion": "\(Migrations.latestVersion)"])
        exit(0)
    } catch {
        logger.critical("migrate_failed", metadata: ["error": "\(error)"])
        exit(1)
    }
}

await ServiceMain.run(AdminSettings.self) { settings, logger in
    buildAdmin(settings: settings, logger: logger).assembly
}
