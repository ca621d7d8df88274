//! The scripted table-booking agent as a pure state machine: transcripts,
//! DTMF and tool outcomes in, [`Action`]s out. No I/O and no clock; the
//! stream driver ([`super::session`]) turns actions into timed events.

use serde_json::{Value, json};

use super::slots::{self, Expecting, Token, has_any, has_pair, number_words, spoken_time};

/// The greeting, turn 0.
pub const GREETING: &str = "Hi, this is Luigi's. How can I help you today?";
/// Reply to anything the bot cannot use.
pub const NOT_UNDERSTOOD: &str = "Sorry, I didn't catch that. Could you say it again?";
/// Said before the availability check.
pub const CHECKING: &str = "Let me check that for you.";
/// Said before escalating.
pub const TRANSFER: &str = "Of course, let me transfer you.";
/// Said before ending the call at the caller's request.
pub const GOODBYE: &str = "Goodbye!";

/// The availability tool.
pub const CHECK_AVAILABILITY: &str = "check_availability";
/// The (privileged) booking tool.
pub const BOOK_TABLE: &str = "book_table";

/// One thing the bot does, in order. `CallTool` suspends the turn until
/// [`Bot::on_tool_outcome`] is called.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Speak this sentence (streamed word by word).
    Say(String),
    /// A slot was filled or changed.
    Slot { name: &'static str, value: String },
    /// Ask callgate to run a tool; the turn waits for its result.
    CallTool {
        name: &'static str,
        arguments_json: String,
        privileged: bool,
    },
    /// The reply is complete (`TurnComplete`).
    Complete,
    /// Hand the call to a human.
    Escalate(&'static str),
    /// End the call.
    EndCall(&'static str),
}

/// How a tool call ended, as far as the bot is concerned.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolOutcome {
    /// The tool's JSON result.
    Ok(Value),
    /// An error result (`is_error`, or a result that is not JSON).
    Err(String),
    /// No result within `tool_result_timeout_ms`.
    TimedOut,
}

/// Where the conversation is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Filling party size, name and time.
    Collecting,
    /// Waiting for `check_availability`.
    Checking,
    /// A free table was offered; waiting for yes/no.
    Offered,
    /// Waiting for `book_table`.
    Booking,
    /// Booked; the call is ending.
    Done,
}

/// The booking slots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slots {
    pub party_size: Option<u32>,
    pub name: Option<String>,
    /// `HH:MM`, 24-hour.
    pub time: Option<String>,
}

impl Slots {
    fn missing(&self) -> Expecting {
        if self.party_size.is_none() {
            Expecting::PartySize
        } else if self.name.is_none() {
            Expecting::Name
        } else if self.time.is_none() {
            Expecting::Time
        } else {
            Expecting::Nothing
        }
    }
}

/// The bot's whole state.
#[derive(Clone, Debug)]
pub struct Bot {
    slots: Slots,
    phase: Phase,
    /// What the caller heard of the last interrupted reply.
    last_played: Option<String>,
}

impl Default for Bot {
    fn default() -> Self {
        Bot::new()
    }
}

impl Bot {
    /// A fresh conversation.
    pub fn new() -> Self {
        Bot {
            slots: Slots::default(),
            phase: Phase::Collecting,
            last_played: None,
        }
    }

    /// The slots known so far.
    pub fn slots(&self) -> &Slots {
        &self.slots
    }

    /// The conversation phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// What the caller heard of the last interrupted reply.
    pub fn last_played(&self) -> Option<&str> {
        self.last_played.as_deref()
    }

    /// Turn 0.
    pub fn greeting(&self) -> Vec<Action> {
        vec![Action::Say(GREETING.to_owned()), Action::Complete]
    }

    /// The reply to one user turn.
    pub fn on_user_turn(&mut self, transcript: &str) -> Vec<Action> {
        let tokens = slots::tokenize(transcript);
        if wants_human(&tokens) {
            return escalate();
        }
        if has_any(&tokens, &["goodbye", "bye"]) || has_pair(&tokens, "good", "bye") {
            return vec![
                say(GOODBYE),
                Action::Complete,
                Action::EndCall("caller_goodbye"),
            ];
        }
        match self.phase {
            Phase::Offered if is_yes(&tokens) => self.book(),
            // The confirmation (and its EndCall) may have been cut off by
            // an interruption: confirm again and end the call.
            Phase::Done => vec![
                say("You're all set. See you tonight!"),
                Action::Complete,
                Action::EndCall("booking_confirmed"),
            ],
            _ => self.collect(transcript, &tokens),
        }
    }

    /// DTMF: `0` asks for a human; other digits are ignored (no reply).
    pub fn on_dtmf(&mut self, digits: &str) -> Vec<Action> {
        if digits.contains('0') {
            escalate()
        } else {
            Vec::new()
        }
    }

    /// The reply was cut off (interrupt or a newer turn): forget a pending
    /// tool call so the next turn can ask again, and remember what was heard.
    pub fn on_turn_cancelled(&mut self, played_text: Option<&str>) {
        if let Some(played) = played_text {
            self.last_played = Some(played.to_owned());
        }
        self.phase = match self.phase {
            Phase::Checking => Phase::Collecting,
            Phase::Booking => Phase::Offered,
            other => other,
        };
    }

    /// Remembers what the caller heard without cancelling anything.
    pub fn remember_played(&mut self, played_text: &str) {
        self.last_played = Some(played_text.to_owned());
    }

    /// Continues the suspended turn with a tool's outcome. Returns nothing
    /// when no tool was pending (a stale result).
    pub fn on_tool_outcome(&mut self, outcome: ToolOutcome) -> Vec<Action> {
        match self.phase {
            Phase::Checking => self.availability(outcome),
            Phase::Booking => self.booked(outcome),
            _ => Vec::new(),
        }
    }

    fn collect(&mut self, transcript: &str, tokens: &[Token]) -> Vec<Action> {
        let found = slots::extract(transcript, self.slots.missing());
        let mut actions = self.apply(found);
        let changed = !actions.is_empty();
        if self.slots.missing() == Expecting::Nothing {
            if !changed && is_no(tokens) {
                self.slots.time = None;
                self.phase = Phase::Collecting;
                return vec![
                    say("No problem. What time would suit you instead?"),
                    Action::Complete,
                ];
            }
            if changed || is_yes(tokens) || self.phase == Phase::Collecting {
                actions.extend(self.check());
                return actions;
            }
        }
        if !changed {
            return vec![say(NOT_UNDERSTOOD), Action::Complete];
        }
        actions.push(Action::Say(self.ask_next(&actions)));
        actions.push(Action::Complete);
        actions
    }

    /// Stores new slot values; one `Slot` action per change.
    fn apply(&mut self, found: slots::Extracted) -> Vec<Action> {
        let mut actions = Vec::new();
        if let Some(n) = found
            .party_size
            .filter(|n| self.slots.party_size != Some(*n))
        {
            self.slots.party_size = Some(n);
            actions.push(slot("party_size", n.to_string()));
        }
        if let Some(name) = found.name.filter(|v| self.slots.name.as_ref() != Some(v)) {
            self.slots.name = Some(name.clone());
            actions.push(slot("name", name));
        }
        if let Some(time) = found.time.filter(|v| self.slots.time.as_ref() != Some(v)) {
            self.slots.time = Some(time.clone());
            actions.push(slot("time", time));
        }
        actions
    }

    /// Acknowledges the last slot just filled and asks for the next one.
    fn ask_next(&self, changed: &[Action]) -> String {
        let ack = match changed.last() {
            Some(Action::Slot { name: "name", .. }) => format!("Thanks, {}.", self.first_name()),
            Some(Action::Slot {
                name: "party_size",
                value,
            }) => match value.parse() {
                Ok(n) => format!("A table for {}.", number_words(n)),
                Err(_) => "Sure.".to_owned(),
            },
            _ => "Got it.".to_owned(),
        };
        let question = match self.slots.missing() {
            Expecting::PartySize => "How many people will be joining?",
            Expecting::Name => "What name is the booking under?",
            Expecting::Time => "What time would you like?",
            Expecting::Nothing => "Shall I check availability?",
        };
        format!("{ack} {question}")
    }

    fn check(&mut self) -> Vec<Action> {
        self.phase = Phase::Checking;
        let args = json!({"party_size": self.slots.party_size, "time": self.slots.time});
        vec![say(CHECKING), tool(CHECK_AVAILABILITY, &args, false)]
    }

    fn book(&mut self) -> Vec<Action> {
        self.phase = Phase::Booking;
        let args = json!({
            "name": self.slots.name,
            "party_size": self.slots.party_size,
            "time": self.slots.time,
        });
        vec![tool(BOOK_TABLE, &args, true)]
    }

    fn availability(&mut self, outcome: ToolOutcome) -> Vec<Action> {
        let party = number_words(self.slots.party_size.unwrap_or(0));
        let time = spoken_time(self.slots.time.as_deref().unwrap_or(""));
        let text = match outcome {
            ToolOutcome::Ok(v) if v.get("available") == Some(&Value::Bool(true)) => {
                self.phase = Phase::Offered;
                format!("Good news, a table for {party} at {time} is free. Shall I book it?")
            }
            ToolOutcome::Ok(_) => {
                self.phase = Phase::Collecting;
                self.slots.time = None;
                format!("Sorry, nothing for {party} at {time}. Another time, perhaps?")
            }
            ToolOutcome::Err(_) | ToolOutcome::TimedOut => {
                self.phase = Phase::Collecting;
                "Sorry, I couldn't check just now. Shall I try again?".to_owned()
            }
        };
        vec![Action::Say(text), Action::Complete]
    }

    fn booked(&mut self, outcome: ToolOutcome) -> Vec<Action> {
        if let ToolOutcome::Ok(_) = outcome {
            self.phase = Phase::Done;
            let text = format!("You're booked, {}. See you tonight!", self.first_name());
            return vec![
                Action::Say(text),
                Action::Complete,
                Action::EndCall("booking_confirmed"),
            ];
        }
        self.phase = Phase::Offered;
        vec![
            say("Sorry, the booking didn't go through. Shall I try again?"),
            Action::Complete,
        ]
    }

    fn first_name(&self) -> &str {
        let name = self.slots.name.as_deref().unwrap_or("");
        name.split_whitespace().next().unwrap_or(name)
    }
}

fn say(text: &str) -> Action {
    Action::Say(text.to_owned())
}

fn slot(name: &'static str, value: String) -> Action {
    Action::Slot { name, value }
}

fn tool(name: &'static str, args: &Value, privileged: bool) -> Action {
    Action::CallTool {
        name,
        arguments_json: args.to_string(),
        privileged,
    }
}

fn escalate() -> Vec<Action> {
    vec![
        say(TRANSFER),
        Action::Complete,
        Action::Escalate("caller_requested_human"),
    ]
}

/// "person" counts unless it follows a number ("one person" is a party).
fn wants_human(tokens: &[Token]) -> bool {
    let person = tokens.iter().enumerate().any(|(i, t)| {
        t.lower == "person" && (i == 0 || slots::number(&tokens[i - 1].lower).is_none())
    });
    person || has_any(tokens, &["human", "agent", "representative", "operator"])
}

fn is_yes(tokens: &[Token]) -> bool {
    has_any(
        tokens,
        &[
            "yes",
            "yeah",
            "yep",
            "yup",
            "sure",
            "ok",
            "okay",
            "absolutely",
        ],
    ) || has_pair(tokens, "please", "book")
        || has_pair(tokens, "book", "it")
        || has_pair(tokens, "go", "ahead")
}

fn is_no(tokens: &[Token]) -> bool {
    has_any(tokens, &["no", "nope", "nah"])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::DEFAULT_CALLER_SCRIPT;

    fn texts(actions: &[Action]) -> Vec<&str> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Say(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn default_script_end_to_end() {
        let mut bot = Bot::new();
        assert_eq!(bot.greeting(), vec![say(GREETING), Action::Complete]);
        let a = bot.on_user_turn(DEFAULT_CALLER_SCRIPT[0]);
        assert_eq!(a[0], slot("party_size", "4".into()));
        assert_eq!(
            texts(&a),
            ["A table for four. What name is the booking under?"]
        );
        let a = bot.on_user_turn(DEFAULT_CALLER_SCRIPT[1]);
        assert_eq!(a[0], slot("name", "Alex Morgan".into()));
        assert_eq!(texts(&a), ["Thanks, Alex. What time would you like?"]);
        let a = bot.on_user_turn(DEFAULT_CALLER_SCRIPT[2]);
        assert_eq!(
            a,
            vec![
                slot("time", "19:30".into()),
                say(CHECKING),
                tool(
                    CHECK_AVAILABILITY,
                    &json!({"party_size": 4, "time": "19:30"}),
                    false
                ),
            ]
        );
        assert_eq!(bot.phase(), Phase::Checking);
        let a = bot.on_tool_outcome(ToolOutcome::Ok(json!({"available": true})));
        assert_eq!(
            texts(&a),
            ["Good news, a table for four at 7:30 is free. Shall I book it?"]
        );
        assert_eq!(a.last(), Some(&Action::Complete));
        let a = bot.on_user_turn(DEFAULT_CALLER_SCRIPT[3]);
        let args = json!({"name": "Alex Morgan", "party_size": 4, "time": "19:30"});
        assert_eq!(a, vec![tool(BOOK_TABLE, &args, true)]);
        let a = bot.on_tool_outcome(ToolOutcome::Ok(json!({"confirmation": "LUI-0042"})));
        assert_eq!(
            a,
            vec![
                say("You're booked, Alex. See you tonight!"),
                Action::Complete,
                Action::EndCall("booking_confirmed"),
            ]
        );
        assert_eq!(bot.phase(), Phase::Done);
        let a = bot.on_user_turn("sorry, what was that?");
        assert_eq!(a.last(), Some(&Action::EndCall("booking_confirmed")));
        let a = bot.on_user_turn(DEFAULT_CALLER_SCRIPT[4]);
        assert_eq!(a.last(), Some(&Action::EndCall("caller_goodbye")));
    }

    #[test]
    fn escalation_by_voice_and_dtmf() {
        let mut bot = Bot::new();
        let a = bot.on_user_turn("I want to talk to a person");
        assert_eq!(a, escalate());
        assert_eq!(bot.on_dtmf("0"), escalate());
        assert!(bot.on_dtmf("5").is_empty());
        let a = bot.on_user_turn("a table for one person");
        assert_eq!(
            a[0],
            slot("party_size", "1".into()),
            "'one person' is a party"
        );
    }

    #[test]
    fn gibberish_and_all_at_once() {
        let mut bot = Bot::new();
        assert_eq!(
            bot.on_user_turn("purple monkey"),
            vec![say(NOT_UNDERSTOOD), Action::Complete]
        );
        let a = bot.on_user_turn("Table for 14 at 8 pm under Rossi");
        assert_eq!(a.len(), 5, "three slots, checking, tool call: {a:?}");
        let a = bot.on_tool_outcome(ToolOutcome::Ok(json!({"available": false})));
        assert_eq!(
            texts(&a),
            ["Sorry, nothing for fourteen at 8:00. Another time, perhaps?"]
        );
        assert_eq!(bot.slots().time, None);
        let a = bot.on_user_turn("how about seven thirty");
        assert_eq!(a[0], slot("time", "19:30".into()));
        assert_eq!(bot.phase(), Phase::Checking);
    }

    #[test]
    fn tool_timeout_apologises_and_retries_on_yes() {
        let mut bot = Bot::new();
        bot.on_user_turn("four people at seven under Alex");
        let a = bot.on_tool_outcome(ToolOutcome::TimedOut);
        assert_eq!(
            texts(&a),
            ["Sorry, I couldn't check just now. Shall I try again?"]
        );
        assert_eq!(a.last(), Some(&Action::Complete));
        assert_eq!(bot.phase(), Phase::Collecting);
        let a = bot.on_user_turn("yes please");
        assert!(matches!(
            a.last(),
            Some(Action::CallTool {
                name: CHECK_AVAILABILITY,
                ..
            })
        ));
    }

    #[test]
    fn booking_failure_and_decline() {
        let mut bot = Bot::new();
        bot.on_user_turn("four people at seven under Alex");
        bot.on_tool_outcome(ToolOutcome::Ok(json!({"available": true})));
        bot.on_user_turn("yes");
        let a = bot.on_tool_outcome(ToolOutcome::Err("500".into()));
        assert_eq!(bot.phase(), Phase::Offered);
        assert_eq!(a.last(), Some(&Action::Complete));
        let a = bot.on_user_turn("no");
        assert_eq!(texts(&a), ["No problem. What time would suit you instead?"]);
        assert_eq!(bot.slots().time, None);
    }

    #[test]
    fn cancelled_turn_forgets_pending_tool_and_stale_results_are_ignored() {
        let mut bot = Bot::new();
        bot.on_user_turn("four people at seven under Alex");
        bot.on_turn_cancelled(Some("Let me"));
        assert_eq!(bot.phase(), Phase::Collecting);
        assert_eq!(bot.last_played(), Some("Let me"));
        assert!(
            bot.on_tool_outcome(ToolOutcome::Ok(json!({"available": true})))
                .is_empty()
        );
    }

    #[test]
    fn every_reply_is_short() {
        let mut bot = Bot::new();
        let mut all = bot.greeting();
        for line in ["seventeen people", "under Bartholomew", "at 11:45", "yes"] {
            all.extend(bot.on_user_turn(line));
            all.extend(bot.on_tool_outcome(ToolOutcome::Ok(json!({"available": true}))));
        }
        for text in texts(&all) {
            assert!(text.len() < 70, "{text:?} is too long");
        }
    }
}
