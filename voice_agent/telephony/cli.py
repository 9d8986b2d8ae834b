"""``voice-agent serve``, ``dial`` and ``talk``, and the audio modality of ``simulate``.

Register the commands on the main app with :func:`register_telephony_commands`; ``simulate
--modality audio`` calls :func:`run_audio_simulation` and :func:`print_audio_simulation`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib
import json
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from voice_agent.audio.manifest import AudioModelError
from voice_agent.audio.stack import INTERIMS_HELP, AudioStack, SttKind, TtsKind, agent_ears, caller_voice
from voice_agent.extras import install_hint, need
from voice_agent.telephony.heap import DEFAULT_YOUNG_THRESHOLD, check_young_threshold

if TYPE_CHECKING:
    from voice_agent.telephony.workers import WorkerSlot

_STACK_HELP = "Audio stack: default (Whisper + Piper), light (pocketsphinx + espeak-ng) or fake (no models)."


def _fail(command: str, message: str, code: int = 2) -> None:
    print(f"voice-agent {command}: error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def _stack(command: str, name: str) -> AudioStack:
    try:
        return AudioStack.named(name)
    except ValueError as exc:
        _fail(command, str(exc))
        raise  # unreachable: _fail raises


def serve_command(
    host: Annotated[str, typer.Option("--host", help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to bind.")] = 8765,
    provider: Annotated[str, typer.Option("--provider", help="twilio, telnyx or plivo.")] = "twilio",
    public_url: Annotated[
        str | None, typer.Option("--public-url", help="Public https base URL the provider reaches (for stream URLs "
                                 "and Twilio signatures).")
    ] = None,
    production: Annotated[
        bool, typer.Option("--production", help="Reject unsigned webhooks (also VOICE_AGENT_PRODUCTION=1); needs "
                           "--public-url and TWILIO_AUTH_TOKEN, TELNYX_PUBLIC_KEY or PLIVO_AUTH_TOKEN.")
    ] = False,
    max_calls: Annotated[int, typer.Option("--max-calls", help="Concurrent calls; more are turned away politely.")] = 4,
    stack: Annotated[str, typer.Option("--stack", help=_STACK_HELP)] = "default",
    transcripts: Annotated[
        Path | None, typer.Option("--transcripts", help="Write each call's record here (mode 0600): <call>.jsonl "
                                  "appended as the call happens, <call>.json at its end.")
    ] = None,
    retention_days: Annotated[
        float, typer.Option("--transcript-retention-days", help="Delete records older than this many days, at "
                            "start-up and daily (0: keep forever).")
    ] = 30.0,
    drain_timeout: Annotated[
        float, typer.Option("--drain-timeout", help="SIGTERM: seconds active calls may take to finish; calls still "
                            "running then hear a goodbye and are ended.")
    ] = 300.0,
    knowledge: Annotated[
        bool, typer.Option("--knowledge/--no-knowledge", help="Retrieve from config/knowledge for each caller turn.")
    ] = True,
    script: Annotated[
        str | None, typer.Option("--script", help="--stack fake: the scripted recogniser hears this scenario's "
                                 "caller lines (name or YAML path).")
    ] = None,
    fleet_max_calls: Annotated[
        int, typer.Option("--fleet-max-calls", help="With the redis store or --workers: calls the whole fleet of "
                          "workers takes at once (0: only each worker's --max-calls).")
    ] = 0,
    hand_over: Annotated[
        bool | None, typer.Option("--hand-over/--no-hand-over", help="On SIGTERM, save active calls and send "
                                  "them back through the provider to another worker of the same store "
                                  "(default: on with the redis store, off otherwise: a lone worker lets its "
                                  "calls finish; always off with --workers, whose workers drain together).")
    ] = None,
    workers: Annotated[
        int, typer.Option("--workers", help="Worker processes on one port (one socket the supervisor binds and "
                          "they inherit; each takes --max-calls calls). One process uses one core at most.")
    ] = 1,
    interims: Annotated[bool, typer.Option("--interims/--no-interims", help=INTERIMS_HELP)] = True,
    gc_young_threshold: Annotated[
        int, typer.Option("--gc-young-threshold", help="Once warmed up, freeze start-up objects out of the garbage "
                          "collector and collect the young generation every this many net allocations (a full "
                          "collection pauses every call of the process); 0: CPython's collector as it is.")
    ] = DEFAULT_YOUNG_THRESHOLD,
) -> None:
    """Runs the telephony bridge: provider webhook, media-stream WebSocket, one pipeline per call.

    With a call store (the ``store`` settings: SQLite by default, Redis for several workers) every call's
    state is saved after each turn; a call whose stream ends without a hang-up resumes where it was.
    With ``--workers N`` a supervisor forks N bridges on the same port; they share stream tokens and the
    fleet-wide cap through the Redis fleet (``redis`` store) or a local fleet file (any other store).
    """
    if workers < 1:
        _fail("serve", f"--workers must be at least 1, got {workers}")
    if workers > 1 and port == 0:
        _fail("serve", "--workers needs a fixed --port (every worker binds the same one)")
    try:
        check_young_threshold(gc_young_threshold)  # before any worker is forked, so the error is said once
    except ValueError as exc:
        _fail("serve", str(exc))
    if workers == 1:
        _serve_worker(host, port, provider, public_url, production, max_calls, stack, transcripts, retention_days,
                      drain_timeout, knowledge, script, fleet_max_calls, hand_over, interims=interims,
                      gc_young_threshold=gc_young_threshold)
        return
    need("telephony", "voice-agent serve")
    from voice_agent.telephony.config import ConfigError, ServerConfig
    from voice_agent.telephony.process import listen
    from voice_agent.telephony.workers import run_workers

    try:
        # Bound once here, without SO_REUSEPORT: a port in use is refused now, and the workers inherit it.
        sock = listen(ServerConfig(host=host, port=port))
    except ConfigError as exc:
        _fail("serve", str(exc))
        return

    def worker(slot: WorkerSlot) -> None:
        try:
            _serve_worker(host, port, provider, public_url, production, max_calls, stack, transcripts,
                          retention_days, drain_timeout, knowledge, script, fleet_max_calls, hand_over,
                          worker=slot, interims=interims, gc_young_threshold=gc_young_threshold)
        except typer.Exit as exc:
            raise SystemExit(exc.exit_code) from None

    print(f"voice-agent serve: {workers} workers on {host}:{port}", file=sys.stderr)
    code = run_workers(workers, sock, worker)
    if code:
        raise typer.Exit(code)


def _serve_worker(
    host: str, port: int, provider: str, public_url: str | None, production: bool, max_calls: int, stack: str,
    transcripts: Path | None, retention_days: float, drain_timeout: float, knowledge: bool, script: str | None,
    fleet_max_calls: int, hand_over: bool | None, *, worker: WorkerSlot | None = None, interims: bool = True,
    gc_young_threshold: int = DEFAULT_YOUNG_THRESHOLD,
) -> None:
    """One bridge process (``serve``'s body); a worker of ``--workers`` has its slot (index, fleet file, socket)."""
    from voice_agent.call.factory import call_factory, call_store
    from voice_agent.settings import SettingsError, load_settings
    from voice_agent.store.base import StoreError
    from voice_agent.telemetry import install_telemetry
    from voice_agent.telephony.config import ConfigError, ServerConfig
    from voice_agent.telephony.fleet import fleet_for
    from voice_agent.telephony.process import serve
    from voice_agent.telephony.providers import HangupCredentials, Provider
    from voice_agent.telephony.workers import serve_reporting

    try:
        chosen = Provider(provider)
    except ValueError:
        _fail("serve", f"--provider takes twilio, telnyx or plivo, got {provider!r}")
        return
    try:
        settings = load_settings()
        call_factory(settings)("settings-check")  # a broken summarizer or LLM setting fails now, in one line
        telemetry = install_telemetry(settings.telemetry)
    except SettingsError as exc:
        _fail("serve", str(exc))
        return
    audio_stack = _stack("serve", stack).with_interims(interims)
    if script is not None:
        from voice_agent.harness.scenarios import load_scenario

        try:
            scripted = load_scenario(script)
        except (FileNotFoundError, ValueError) as exc:
            _fail("serve", f"--script: {exc}")
            return
        audio_stack = audio_stack.with_script([t.text for t in scripted.turns if t.speaker == "caller"])
    try:
        store = call_store(settings)
    except StoreError as exc:
        _fail("serve", str(exc))
        return
    if fleet_max_calls < 0:
        _fail("serve", "--fleet-max-calls must be 0 or more")
    name = f"{socket.gethostname()}:{port}" + (f"/{worker.index}" if worker is not None else "")
    fleet = fleet_for(settings.store.backend, settings.store.url, name, fleet_max_calls)
    if worker is not None:
        if fleet is None:
            from voice_agent.telephony.local_fleet import LocalFleet

            fleet = LocalFleet(worker.fleet_path, name, max_calls=fleet_max_calls)
        # The workers of one supervisor drain together, whatever the fleet: handed over, a call would only go
        # to a sibling that is draining too, and on to the next, until it is dropped.
        hand_over = False if hand_over is None else hand_over
    config = ServerConfig(
        host=host, port=port, provider=chosen, public_url=public_url,
        production=production or os.environ.get("VOICE_AGENT_PRODUCTION") == "1",
        credentials=HangupCredentials.from_env(), max_calls=max_calls, stack=audio_stack, store=store, fleet=fleet,
        transcript_dir=transcripts, drain_timeout_secs=drain_timeout, knowledge=knowledge, hand_over=hand_over,
        transcript_retention_days=None if retention_days == 0 else retention_days,
        calls_token=os.environ.get("VOICE_AGENT_CALLS_TOKEN") or None, gc_young_threshold=gc_young_threshold,
        leg_lease_secs=settings.store.lease_secs, stream_silence_secs=settings.store.stream_silence_secs,
        transfer=settings.transfer, group_size=worker.count if worker is not None else 0,
    )
    try:
        config.validate()
        factory = call_factory(settings)
        sock = worker.sock if worker is not None else None
        asyncio.run(serve_reporting(lambda ready: serve(config, factory, ready=ready, sock=sock), worker))
    except (ConfigError, AudioModelError) as exc:
        _fail("serve", str(exc))
    except OSError as exc:
        _fail("serve", f"cannot start: {exc}")
    finally:
        telemetry.shutdown()
        if store is not None:
            store.close()


def dial_command(
    url: Annotated[str, typer.Argument(help="The bridge's webhook (http://host:port/voice) or stream (ws://.../ws).")],
    scenario: Annotated[str, typer.Option("--scenario", help="Scenario name or YAML path.")] = "bridge_smoke",
    speed: Annotated[float, typer.Option("--speed", help="Media pacing relative to real time.")] = 1.0,
    voice: Annotated[str, typer.Option("--voice", help="Caller voice: piper, espeak or tone.")] = "piper",
    ears: Annotated[str, typer.Option("--ears", help="Transcribe the agent with whisper, pocketsphinx or none.")] = (
        "whisper"
    ),
    out: Annotated[Path, typer.Option("--out", help="Directory for the agent WAV and the transcript.")] = Path(
        "calls"
    ),
    auth_token: Annotated[
        str | None, typer.Option("--auth-token", envvar="TWILIO_AUTH_TOKEN", help="Sign the webhook as Twilio does.")
    ] = None,
) -> None:
    """Calls the bridge as Twilio would and plays a scenario's caller lines with synthesised speech."""
    from voice_agent.harness.scenarios import load_scenario

    need("telephony", "voice-agent dial")
    from voice_agent.telephony.emulator import EmulatorConfig, TwilioCallerEmulator

    try:
        record = load_scenario(scenario)
        synth = caller_voice(TtsKind(voice))
        transcriber = agent_ears(None if ears == "none" else SttKind(ears))
    except (FileNotFoundError, ValueError, AudioModelError) as exc:
        _fail("dial", str(exc))
        return
    lines = [t.text for t in record.turns if t.speaker == "caller"]
    emulator = TwilioCallerEmulator(synth, transcriber, EmulatorConfig(speed=speed, auth_token=auth_token), out)
    result = asyncio.run(emulator.dial(url, lines))
    print(result.render())
    if result.transcript_path:
        print(f"transcript: {result.transcript_path}  agent audio: {result.wav_path}")
    if result.status != "completed":
        raise typer.Exit(1)


def balance_command(
    worker: Annotated[
        list[str], typer.Option("--worker", help="A worker's host:port (repeat; the first ready one gets each "
                                "connection).")
    ],
    host: Annotated[str, typer.Option("--host", help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to bind.")] = 8765,
) -> None:
    """A small health-checked balancer for several local workers: each connection goes to the first worker
    whose /readyz is 200 (a killed worker refuses, a draining one says 503), so resumes reach a live one."""
    need("telephony", "voice-agent balance")
    from voice_agent.telephony.balancer import ReadyProxy

    backends = []
    for spec in worker:
        name, _, number = spec.rpartition(":")
        if not name or not number.isdigit():
            _fail("balance", f"--worker takes host:port, got {spec!r}")
        backends.append((name, int(number)))
    print(f"balancing {host}:{port} over {', '.join(worker)}", file=sys.stderr)
    try:
        asyncio.run(ReadyProxy(backends, host, port).serve_forever())
    except OSError as exc:
        _fail("balance", f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        pass


def talk_command(
    stack: Annotated[str, typer.Option("--stack", help=_STACK_HELP)] = "default",
) -> None:
    """Talks to the agent through this machine's microphone and speaker (needs PyAudio and a device)."""
    problem = local_audio_problem()
    if problem is not None:
        # A missing extra exits 3, as every command does; a machine without a device is another failure.
        _fail("talk", problem, code=3 if "is not installed" in problem else 1)
    from voice_agent.settings import SettingsError

    chosen = _stack("talk", stack)
    try:
        asyncio.run(_talk(chosen))
    except (AudioModelError, SettingsError) as exc:
        _fail("talk", str(exc), code=1)
    except KeyboardInterrupt:
        pass


def local_audio_problem() -> str | None:
    """Why a local microphone/speaker session cannot start, in one line; None when it can."""
    try:
        pyaudio: Any = importlib.import_module("pyaudio")
    except (ImportError, OSError) as exc:
        return f"no local audio: PyAudio/PortAudio is not installed ({exc}); {install_hint('local')}"
    try:
        audio = pyaudio.PyAudio()
    except Exception as exc:
        return f"no local audio: PortAudio failed to start ({exc})"
    try:
        devices = [audio.get_device_info_by_index(i) for i in range(audio.get_device_count())]
    finally:
        audio.terminate()
    if not any(int(d.get("maxInputChannels", 0)) > 0 for d in devices):
        return "no local audio: no input device (microphone) found"
    if not any(int(d.get("maxOutputChannels", 0)) > 0 for d in devices):
        return "no local audio: no output device (speaker) found"
    return None


async def _talk(stack: AudioStack) -> None:
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.aggregators.llm_response_universal import LLMUserAggregatorParams
    from pipecat.transports.local.audio import LocalAudioTransport, LocalAudioTransportParams
    from pipecat.workers.runner import WorkerRunner

    from processors.spoken_ids import SpokenIdNormalizer, recognizer_prompt
    from voice_agent.call.factory import build_call
    from voice_agent.call.pipeline import AUDIO_TURN_STOP_TIMEOUT, build_call_pipeline
    from voice_agent.settings import load_settings
    from voice_agent.telemetry import install_telemetry

    settings = load_settings()
    install_telemetry(settings.telemetry)
    parts = build_call(settings, "local")
    await asyncio.to_thread(stack.warm_up)
    audio = await asyncio.to_thread(stack.build, recognizer_prompt(parts.id_shapes, parts.topic))
    transport = LocalAudioTransport(LocalAudioTransportParams(audio_in_enabled=True, audio_out_enabled=True))
    call = build_call_pipeline(
        parts.session, parts.llm,
        before_user=[transport.input(), *audio.before_user, SpokenIdNormalizer(parts.id_shapes)],
        tts=[audio.tts, transport.output()],
        user_params=LLMUserAggregatorParams(user_turn_strategies=audio.turn_strategies,
                                            user_turn_stop_timeout=AUDIO_TURN_STOP_TIMEOUT),
    )
    worker = PipelineWorker(call.pipeline, params=PipelineParams(audio_in_sample_rate=16000), enable_rtvi=False,
                            idle_timeout_secs=None, check_dangling_tasks=False)
    print("Talk to the agent; Ctrl+C ends the call.", file=sys.stderr)
    runner = WorkerRunner(handle_sigint=True, check_dangling_tasks=False)
    await runner.add_workers(worker)
    await runner.run()


# --- simulate --modality audio -------------------------------------------------------------------------------------


async def run_audio_simulation(
    scenario: str = "billing_dispute",
    *,
    keep: int = 6,
    every: int = 5,
    stack: str = "default",
    voice: str = "piper",
    ears: str = "whisper",
    speed: float = 1.0,
    out: Path | None = None,
    interims: bool = True,
) -> dict[str, Any]:
    """Plays a scenario through the telephony bridge on loopback with real audio both ways.

    The bridge runs in this process on a free port with the lanes policy and the reference
    agent; the Twilio emulator dials it, speaks the caller lines and transcribes the replies.

    Args:
        interims: The stack's interim transcripts (off: every retrieval on the critical path).

    Returns:
        A JSON-ready report: per-turn caller line, recognised text, agent reply as heard and
        latency, the tool calls executed, the scenario's facts present, the backend's effects, and the
        served call's retrieval (hit rate, critical-path time, searches per turn; None without knowledge).

    Raises:
        FileNotFoundError, ValueError: Unknown scenario or stack.
        AudioModelError: A model is missing.
    """
    from voice_agent.call.factory import call_factory
    from voice_agent.harness.scenarios import load_scenario
    from voice_agent.harness.simulation.report import retrieval_summary
    from voice_agent.settings import load_settings, with_overrides

    need("audio", "the audio simulation (--modality audio)")  # first: the audio extra brings telephony too
    need("telephony", "the audio simulation (--modality audio)")
    from voice_agent.telephony.config import ServerConfig
    from voice_agent.telephony.emulator import EmulatorConfig, TwilioCallerEmulator
    from voice_agent.telephony.process import running_bridge

    record = load_scenario(scenario)
    lines = [t.text for t in record.turns if t.speaker == "caller"]
    audio_stack = AudioStack.named(stack).with_script(lines).with_interims(interims)
    settings = with_overrides(load_settings(), policy={"keep": keep, "every": every},
                              call={"reference_date": record.reference_date or dt.date.today()})
    factory = call_factory(settings)
    synth = caller_voice(TtsKind(voice))
    transcriber = agent_ears(None if ears == "none" else SttKind(ears))
    config = ServerConfig(port=0, stack=audio_stack, max_calls=1, idle_timeout_secs=None)
    async with running_bridge(config, factory) as (bridge, url):
        emulator = TwilioCallerEmulator(synth, transcriber, EmulatorConfig(speed=speed), out)
        result = await emulator.dial(f"{url}/voice", lines)
        await asyncio.sleep(0.2)
        calls = [r for r in bridge.registry.all() if r.state == "ended" and r.session is None and r.turns]
    call = calls[-1] if calls else None
    backend = call.extra["domain"].extra.get("backend") if call and "domain" in call.extra else None
    turns = []
    for index, turn in enumerate(result.turns):
        server_turn = call.turns[index] if call and index < len(call.turns) else {}
        turns.append({
            "turn": index + 1, "caller_line": turn.text, "recognised": server_turn.get("caller", ""),
            "agent_heard": turn.agent_text, "agent_said": server_turn.get("agent", ""),
            "latency_ms": turn.latency_ms, "executed": server_turn.get("executed", []),
            "retrieval": server_turn.get("retrieval") or {},
        })
    return {
        "scenario": record.id, "stack": stack, "keep": keep, "every": every, "status": result.status,
        "interims": audio_stack.interims, "retrieval": retrieval_summary([t["retrieval"] for t in turns]),
        "turns": turns, "transcript": call.transcript if call else [],
        "effects": {
            "credits": list(getattr(backend, "credits", [])), "disputes": list(getattr(backend, "disputes", [])),
            "callbacks": list(getattr(backend, "callbacks", [])), "transfers": len(getattr(backend, "transfers", [])),
        },
        "wav": result.wav_path, "call_transcript": result.transcript_path,
    }


def print_audio_simulation(report: dict[str, Any]) -> None:
    """Prints an audio simulation report turn by turn."""
    print(f"{report['scenario']} over the telephony bridge ({report['stack']} stack, K={report['keep']}, "
          f"S={report['every']}): {report['status']}")
    for turn in report["turns"]:
        latency = f"{turn['latency_ms']:.0f} ms" if turn["latency_ms"] is not None else "no reply"
        print(f"\n[{turn['turn']}] caller:     {turn['caller_line']}")
        print(f"    recognised: {turn['recognised']}")
        tools = f"  tools: {', '.join(turn['executed'])}" if turn["executed"] else ""
        print(f"    agent ({latency}): {turn['agent_heard'] or turn['agent_said']}{tools}")
    retrieval = report.get("retrieval")
    if retrieval:
        rate = retrieval["hit_rate"]
        hit = "-" if rate is None else f"{rate * 100:.0f} % of {retrieval['turns_with_chunks']} turns with chunks"
        print(f"\nretrieval ({'interims on' if report.get('interims', True) else 'interims off'}): "
              f"speculative hit rate {hit}; critical path p50 {retrieval['critical_path_ms']['p50']:.1f} ms, "
              f"p95 {retrieval['critical_path_ms']['p95']:.1f} ms; {retrieval['interims_per_turn']:.1f} interims "
              f"and {retrieval['searches_per_turn']:.2f} searches per turn (budget {retrieval['search_budget']:g}"
              f"{', OVER' if retrieval['over_budget'] else ''})")
    effects = report["effects"]
    print(f"\neffects: {len(effects['credits'])} credit(s), {len(effects['disputes'])} dispute(s), "
          f"{len(effects['callbacks'])} callback(s), {effects['transfers']} transfer(s)")
    for credit in effects["credits"]:
        print(f"  credit {credit['amount']:.2f} to {credit['account_id']} on {credit['invoice_id']}")
    if report.get("wav"):
        print(f"agent audio: {report['wav']}")


def simulate_audio_command(
    scenario: Annotated[str, typer.Argument(help="Scenario name or YAML path.")] = "billing_dispute",
    keep: Annotated[int, typer.Option("--keep", help="K: recent turns kept raw.")] = 6,
    every: Annotated[int, typer.Option("--every", help="S: summary cadence.")] = 5,
    stack: Annotated[str, typer.Option("--stack", help=_STACK_HELP)] = "default",
    speed: Annotated[float, typer.Option("--speed", help="Media pacing relative to real time.")] = 1.0,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    interims: Annotated[bool, typer.Option("--interims/--no-interims", help=INTERIMS_HELP)] = True,
) -> None:
    """The audio modality of ``simulate``: one call over the telephony bridge with real audio both ways."""
    try:
        report = asyncio.run(run_audio_simulation(scenario, keep=keep, every=every, stack=stack, speed=speed,
                                                  out=Path("calls"), interims=interims))
    except (FileNotFoundError, ValueError, AudioModelError) as exc:
        _fail("simulate", str(exc))
        return
    print_audio_simulation(report)
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")


def register_telephony_commands(app: typer.Typer) -> None:
    """Adds ``serve``, ``dial``, ``balance`` and ``talk`` to the main ``voice-agent`` app."""
    app.command("serve")(serve_command)
    app.command("dial")(dial_command)
    app.command("balance")(balance_command)
    app.command("talk")(talk_command)
