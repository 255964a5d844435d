import GCWorkerService
import WhisperShared

ServiceMain.useEventLoopsForConcurrency()

await ServiceMain.run(GCWorkerSettings.self) { settings, logger in
    buildGCWorker(settings: settings, logger: logger).assembly
}
