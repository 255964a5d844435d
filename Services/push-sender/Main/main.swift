import PushSenderService
import WhisperShared

await ServiceMain.run(PushSenderSettings.self) { settings, logger in
    buildPushSender(settings: settings, logger: logger).assembly
}
