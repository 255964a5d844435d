import RouterService
import WhisperShared

await ServiceMain.run(RouterSettings.self) { settings, logger in
    buildRouter(settings: settings, logger: logger).assembly
}
