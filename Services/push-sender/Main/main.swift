import PushSenderService
import WhisperShared

ServiceMain.useEventLoopsForConcurrency()

await ServiceMain.run(PushSenderSettings.self) { settings, logger in
    buildPushSender(settings: settings, logger: logger).assembly
}
