import AuthService
import WhisperShared

await ServiceMain.run(AuthSettings.self) { settings, logger in
    buildAuth(settings: settings, logger: logger).assembly
}
