import Foundation
import Logging
import PushSenderService
import WhisperShared

ServiceMain.useEventLoopsForConcurrency()

// `push-sender replay-dead [COUNT]`: dead-lettered wake-ups back into the push stream.
if CommandLine.arguments.dropFirst().first == "replay-dead" {
    let reader = SettingsReader.environment()
    let settings = PushSenderSettings(from: reader)
    let level = settings.common.logLevel
    LoggingSystem.bootstrap { JSONLogHandler(label: $0, service: "push-sender", level: level) }
    let logger = Logger(label: "push-sender")
    let limit = CommandLine.arguments.dropFirst(2).first.flatMap(Int.init) ?? 100_000
    do {
        try reader.validate()
        let moved = try await ReplayDeadCommand.run(settings: settings, limit: max(1, limit), logger: logger)
        logger.info("push_replayed", metadata: ["count": "\(moved)"])
        print("replayed \(moved) wake-ups")
        exit(0)
    } catch {
        logger.critical("push_replay_failed", metadata: ["error": "\(error)"])
        exit(1)
    }
}

await ServiceMain.run(PushSenderSettings.self) { settings, logger in
    buildPushSender(settings: settings, logger: logger).assembly
}
