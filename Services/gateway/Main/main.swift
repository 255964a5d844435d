import GatewayService
import WhisperShared

await ServiceMain.run(GatewaySettings.self) { settings, logger in
    buildGateway(settings: settings, logger: logger).assembly
}
