import AttachmentSignerService
import WhisperShared

ServiceMain.useEventLoopsForConcurrency()

await ServiceMain.run(AttachmentSignerSettings.self) { settings, logger in
    buildAttachmentSigner(settings: settings, logger: logger).assembly
}
