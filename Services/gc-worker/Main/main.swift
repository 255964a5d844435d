import GCWorkerService
import WhisperShared

await ServiceMain.run(GCWorkerSettings.self) { settings, logger in
    buildGCWorker(settings: settings, logger: logger).assembly
}
