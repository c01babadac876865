{{- /* GENERATED from crates/planner/src/corefile/shapes.rs: do not edit. Rewritten by
     `HAIRPIN_BLESS=1 cargo test -p hairpin-planner --test dns_policy`, which fails when
     this file has drifted from the planner's markers and line shapes. Used by the policy
     <release>-dns-block-only (admission-policy.yaml). */ -}}
{{- define "hairpin.dnsPolicy.literalLines" -}}
{'template IN A \x7b': true, 'template IN AAAA \x7b': true, 'template IN ANY \x7b': true, 'authority "\x7b\x7b .Zone \x7d\x7d 30 IN SOA ns.hairpin.invalid. hostmaster.hairpin.invalid. 1 30 30 30 30"': true, 'fallthrough': true, '\x7d': true}
{{- end }}
{{- define "hairpin.dnsPolicy.outside" -}}
variables.new.all(k, (k in variables.old && variables.new[k] == variables.old[k]) || (variables.custom && k.startsWith(variables.ownStem) && !k.substring(size(variables.ownStem)).contains('.') && !k.endsWith('.server')) ||
  ('# END hairpin' + '\n' + variables.new[k] + '\n' + '# BEGIN hairpin').split('# BEGIN hairpin').map(p, p == '' ? '' : [p.indexOf('# END hairpin')].map(e, e < 0 ? p : [[p.substring(e)].map(q, q.substring(q.indexOf('\n') + 1))[0]].map(r, r == '' || r.substring(r.lastIndexOf('\n') + 1).trim() != '' ? r : r.substring(0, r.lastIndexOf('\n') + 1))[0])[0]).join('') ==
  ('# END hairpin' + '\n' + (k in variables.old ? variables.old[k] : '') + '\n' + '# BEGIN hairpin').split('# BEGIN hairpin').map(p, p == '' ? '' : [p.indexOf('# END hairpin')].map(e, e < 0 ? p : [[p.substring(e)].map(q, q.substring(q.indexOf('\n') + 1))[0]].map(r, r == '' || r.substring(r.lastIndexOf('\n') + 1).trim() != '' ? r : r.substring(0, r.lastIndexOf('\n') + 1))[0])[0]).join(''))
&& variables.old.all(k, k in variables.new || (variables.custom && k.startsWith(variables.ownStem) && !k.substring(size(variables.ownStem)).contains('.') && !k.endsWith('.server')) ||
  ('# END hairpin' + '\n' + variables.old[k] + '\n' + '# BEGIN hairpin').split('# BEGIN hairpin').map(p, p == '' ? '' : [p.indexOf('# END hairpin')].map(e, e < 0 ? p : [[p.substring(e)].map(q, q.substring(q.indexOf('\n') + 1))[0]].map(r, r == '' || r.substring(r.lastIndexOf('\n') + 1).trim() != '' ? r : r.substring(0, r.lastIndexOf('\n') + 1))[0])[0]).join('') == '')
{{- end }}
{{- define "hairpin.dnsPolicy.blockLines" -}}
variables.new.all(k, (k in variables.old && variables.new[k] == variables.old[k]) || (variables.custom && k.startsWith(variables.ownStem) && !k.substring(size(variables.ownStem)).contains('.') && !k.endsWith('.server')) ||
  ('# END hairpin' + '\n' + variables.new[k] + '\n' + '# BEGIN hairpin').split('# BEGIN hairpin').all(p, p == '' || [p.indexOf('# END hairpin')].all(e, e == 0 || (e > 0 && [p.indexOf('\n')].all(n, n >= 0 && n < e && p.substring(n + 1, e).split('\n').all(l, [l.trim()].all(w, w == '' || w in variables.literalLines || [w.split(' ')].all(t,
    (size(t) == 6 && t[0] == 'rewrite' && t[1] == 'stop' && t[2] == 'name' && t[3] == 'exact' && t[4] != '' && variables.serviceSuffixes.exists(s, t[5].endsWith(s) && t[5].substring(0, size(t[5]) - size(s)).matches('^[-a-z0-9]+$')))
    || (size(t) == 6 && t[0] == 'rewrite' && t[1] == 'stop' && t[2] == 'name' && t[3] == 'exact' && t[4] != '' && t[5] == t[4])
    || (size(t) == 8 && t[0] == 'rewrite' && t[1] == 'stop' && t[2] == 'name' && t[3] == 'regex' && t[4].startsWith('^') && t[4].endsWith('\\.$') && variables.serviceSuffixes.exists(s, t[5].endsWith(s) && t[5].substring(0, size(t[5]) - size(s)).matches('^[-a-z0-9]+$')) && t[6] == 'answer' && t[7] == 'auto')
    || (size(t) == 6 && t[0] == 'rewrite' && t[1] == 'stop' && t[2] == 'name' && t[3] == 'suffix' && t[4] in variables.domainSuffixes && t[5] == t[4])
    || (size(t) == 2 && t[0] == 'match' && t[1].startsWith('^') && t[1].endsWith('\\.$'))
    || (size(t) == 8 && t[0] == 'answer' && t[1] == '"\x7b\x7b' && t[2] == '.Name' && t[3] == '\x7d\x7d' && t[4] == '30' && t[5] == 'IN' && t[6] == 'A' && t[7].endsWith('"') && [t[7].substring(0, size(t[7]) - 1)].all(a, isIP(a) && ip(a).family() == 4 && variables.cidrs.exists(c, cidr(c).containsIP(a))))
    || (size(t) == 8 && t[0] == 'answer' && t[1] == '"\x7b\x7b' && t[2] == '.Name' && t[3] == '\x7d\x7d' && t[4] == '30' && t[5] == 'IN' && t[6] == 'AAAA' && t[7].endsWith('"') && [t[7].substring(0, size(t[7]) - 1)].all(a, isIP(a) && ip(a).family() == 6 && variables.cidrs.exists(c, cidr(c).containsIP(a))))))))))))
{{- end }}
{{- define "hairpin.dnsPolicy.ownKey" -}}
variables.new.all(k, (k in variables.old && variables.new[k] == variables.old[k]) || !(variables.custom && k.startsWith(variables.ownStem) && !k.substring(size(variables.ownStem)).contains('.') && !k.endsWith('.server')) ||
  variables.new[k].split('\n').all(l, l == '' || l == '# managed by hairpin; do not edit' || [l.split(' ')].all(t,
    (size(t) == 6 && t[0] == 'rewrite' && t[1] == 'stop' && t[2] == 'name' && t[3] == 'exact' && t[4] != '' && variables.serviceSuffixes.exists(s, t[5].endsWith(s) && t[5].substring(0, size(t[5]) - size(s)).matches('^[-a-z0-9]+$')))
    || (size(t) == 6 && t[0] == 'rewrite' && t[1] == 'stop' && t[2] == 'name' && t[3] == 'exact' && t[4] != '' && t[5] == t[4])
    || (size(t) == 8 && t[0] == 'rewrite' && t[1] == 'stop' && t[2] == 'name' && t[3] == 'regex' && t[4].startsWith('^') && t[4].endsWith('\\.$') && variables.serviceSuffixes.exists(s, t[5].endsWith(s) && t[5].substring(0, size(t[5]) - size(s)).matches('^[-a-z0-9]+$')) && t[6] == 'answer' && t[7] == 'auto'))))
{{- end }}
