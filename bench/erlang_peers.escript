#!/usr/bin/env escript
%% -*- erlang -*-
%%! +sbwt none
%% Erlang/OTP peers of two tasksup benchmarks (issue 17), so ratios are
%% measured on the same machine in the same run (scripts/bench.sh):
%%
%%   sup N F   N dynamic children of a simple_one_for_one supervisor (the
%%             usual OTP setup for many children), each exiting abnormally F
%%             times (restarted at once, transient) and then normally: the
%%             peer of `bench_supervision --tasks=N --failures=F`. Prints
%%             attempts per second over the whole run, children's start
%%             included.
%%   port K B  K runs of the program B through an Erlang port
%%             (open_port spawn_executable, wait for exit_status): the peer of
%%             the process runtime's restart loop (bench_process).
%%
%% Each prints one `RESULT name=... key=value` line. Logging is off (crash
%% reports of the failing children would otherwise dominate), as tasksup's
%% benchmarks run without a log.
-mode(compile).
-export([init/1, start_worker/4]).

main(Args) ->
    logger:set_primary_config(level, none),
    run(Args).

run(["sup", NS, FS]) ->
    N = list_to_integer(NS),
    F = list_to_integer(FS),
    sup(N, F);
run(["port", KS, Bin]) ->
    port(list_to_integer(KS), Bin);
run(_) ->
    io:format(standard_error, "usage: erlang_peers.escript sup N F | port K BINARY~n", []),
    halt(2).

%% --- supervision

sup(N, F) ->
    Counts = ets:new(counts, [public, set, {write_concurrency, true}]),
    Self = self(),
    Start = erlang:monotonic_time(),
    {ok, Sup} = supervisor:start_link(?MODULE, {sup, N * (F + 1) + 10}),
    [begin
         ets:insert(Counts, {I, 0}),
         {ok, _} = supervisor:start_child(Sup, [Counts, I, F, Self])
     end || I <- lists:seq(1, N)],
    wait_done(N),
    Elapsed = erlang:convert_time_unit(erlang:monotonic_time() - Start,
                                       native, microsecond) / 1.0e6,
    Attempts = N * (F + 1),
    io:format("~b children x ~b attempts: ~.3f s, ~.1f attempts/s~n",
              [N, F + 1, Elapsed, Attempts / Elapsed]),
    io:format("RESULT name=erlang_sup children=~b failures=~b attempts=~b "
              "seconds=~.4f attempts_per_s=~.1f otp=~s~n",
              [N, F, Attempts, Elapsed, Attempts / Elapsed,
               erlang:system_info(otp_release)]).

wait_done(0) -> ok;
wait_done(K) -> receive done -> wait_done(K - 1) end.

%% supervisor callback: one child spec, restarted at once on abnormal exit.
init({sup, MaxR}) ->
    {ok, {#{strategy => simple_one_for_one, intensity => MaxR, period => 1},
          [#{id => worker, start => {?MODULE, start_worker, []},
             restart => transient, shutdown => brutal_kill,
             type => worker}]}}.

start_worker(Counts, I, F, Parent) ->
    {ok, proc_lib:spawn_link(fun() -> attempt(Counts, I, F, Parent) end)}.

attempt(Counts, I, F, Parent) ->
    case ets:update_counter(Counts, I, 1) of
        C when C =< F -> exit(failed);
        _ -> Parent ! done
    end.

%% --- port loop

port(K, Bin) ->
    Start = erlang:monotonic_time(),
    [run_once(Bin) || _ <- lists:seq(1, K)],
    Elapsed = erlang:convert_time_unit(erlang:monotonic_time() - Start,
                                       native, microsecond) / 1.0e6,
    io:format("~b runs of ~s through a port: ~.3f s, ~.1f us each~n",
              [K, Bin, Elapsed, Elapsed / K * 1.0e6]),
    io:format("RESULT name=erlang_port runs=~b seconds=~.4f us_per_run=~.1f "
              "otp=~s~n",
              [K, Elapsed, Elapsed / K * 1.0e6, erlang:system_info(otp_release)]).

run_once(Bin) ->
    P = open_port({spawn_executable, Bin}, [exit_status, binary]),
    wait_exit(P).

wait_exit(P) ->
    receive
        {P, {exit_status, _}} -> ok;
        {P, {data, _}} -> wait_exit(P)
    end.
