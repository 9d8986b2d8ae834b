"""Standalone check of the blind paraphrase files (written without reading the agent code).

Usage: python3 check_blind.py   (needs PyYAML; run from anywhere)
"""
import pathlib, re, sys
import yaml

HERE = pathlib.Path(__file__).resolve().parent
SCEN = HERE.parent.parent  # config/scenarios
WORDNUM = {'two': '2', 'twice': '2', 'fourteenth': '14', 'nineteen': '19', 'ninety-nine': '99'}
errors = []


def alnum(s):
    return re.sub(r'[^A-Za-z0-9]', '', s).upper()


def numbers(s):
    return set(re.findall(r'\d+', s))


for split in ('dev', 'test'):
    for path in sorted((HERE / split).glob('*.yaml')):
        doc = yaml.safe_load(path.read_text())
        where = f'{split}/{path.name}'
        scen_id = doc['scenario']
        if scen_id != path.stem:
            errors.append(f'{where}: scenario {scen_id} != file name')
        scen = yaml.safe_load((SCEN / f'{scen_id}.yaml').read_text())
        turns, facts = scen['turns'], {f['key']: f for f in scen['facts']}
        carried = {}
        for f in scen['facts']:
            for t in {f['stated_turn'], *f.get('caller_mention_turns', [])}:
                carried.setdefault(t, set()).add(f['key'])
        seen = set()
        for line in doc['lines']:
            i = line['utterance']
            seen.add(i)
            tag = f'{where} utt {i}'
            if not (0 <= i < len(turns)) or turns[i]['speaker'] != 'caller':
                errors.append(f'{tag}: not a caller turn'); continue
            if line['original'] != turns[i]['text']:
                errors.append(f'{tag}: original differs from scenario text')
            orig_nums = numbers(turns[i]['text'])
            for w, n in WORDNUM.items():
                if w in turns[i]['text'].lower():
                    orig_nums.add(n)
            if len(line['variants']) != 3:
                errors.append(f'{tag}: {len(line["variants"])} variants, want 3')
            for vi, v in enumerate(line['variants']):
                vt = f'{tag} variant {vi + 1}'
                text, vf, ids = v['text'], v.get('facts') or {}, v.get('ids') or {}
                if set(vf) != carried.get(i, set()):
                    errors.append(f'{vt}: facts {sorted(vf)} != carried {sorted(carried.get(i, set()))}')
                for k, span in vf.items():
                    if k not in facts:
                        errors.append(f'{vt}: unknown fact {k}')
                    if span not in text:
                        errors.append(f'{vt}: span for {k} not in text: {span!r}')
                id_keys = {k for k in vf if facts.get(k, {}).get('kind') == 'identifier'}
                if set(ids) != id_keys:
                    errors.append(f'{vt}: ids {sorted(ids)} != identifier facts {sorted(id_keys)}')
                rest = text
                for k, mode in ids.items():
                    canon, span = facts[k]['canonical'], vf.get(k, '')
                    if mode == 'as_written' and span != canon:
                        errors.append(f'{vt}: {k} as_written but span {span!r} != {canon}')
                    elif mode == 'stt' and (alnum(span) != alnum(canon) or span == canon):
                        errors.append(f'{vt}: {k} stt span {span!r} does not keep {canon} letters/digits')
                    elif mode not in ('as_written', 'stt'):
                        errors.append(f'{vt}: {k} bad ids mode {mode}')
                    rest = rest.replace(span, ' ')
                # no number added: digits outside identifier spans must come from the original
                extra = numbers(rest.replace('19.99', '19 99')) - orig_nums
                if extra:
                    errors.append(f'{vt}: numbers not in original: {sorted(extra)}')
                asr = v.get('asr')
                if not isinstance(asr, bool):
                    errors.append(f'{vt}: asr must be true/false')
                elif asr and (text != text.lower() or re.search(r"[.,;:!?'\"]", text.replace('19.99', ''))):
                    errors.append(f'{vt}: asr variant has capitals or punctuation')
        if seen != set(carried):
            errors.append(f'{where}: utterances {sorted(seen)} != fact-carrying {sorted(carried)}')

print('\n'.join(errors) if errors else 'all blind paraphrase files OK')
sys.exit(1 if errors else 0)
