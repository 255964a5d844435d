import AttachmentSignerService
import WhisperShared

await ServiceMain.run(AttachmentSignerSettings.self) { settings, logger in
    buildAttachmentSigner(settings: settings, logger: logger).assembly
}
