import RouterService
import WhisperShared

ServiceMain.useEventLoopsForConcurrency()

await ServiceMain.run(RouterSettings.self) { settings, logger in
    buildRouter(settings: settings, logger: logger).assembly
}
