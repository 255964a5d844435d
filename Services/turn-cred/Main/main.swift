import TurnCredService
import WhisperShared

ServiceMain.useEventLoopsForConcurrency()

await ServiceMain.run(TurnCredSettings.self) { settings, logger in
    buildTurnCred(settings: settings, logger: logger).assembly
}
