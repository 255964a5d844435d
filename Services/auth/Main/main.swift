import AuthService
import WhisperShared

ServiceMain.useEventLoopsForConcurrency()

await ServiceMain.run(AuthSettings.self) { settings, logger in
    buildAuth(settings: settings, logger: logger).assembly
}
