import GatewayService
import WhisperShared

ServiceMain.useEventLoopsForConcurrency()

await ServiceMain.run(GatewaySettings.self) { settings, logger in
    buildGateway(settings: settings, logger: logger).assembly
}
