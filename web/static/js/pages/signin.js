import { api } from '../api.js';
import { h, field, showErrors, clearErrors } from '../ui.js';
import { afterSignIn } from '../main.js';

export async function signIn(main) {
  const email = h('input', { type: 'email', autocomplete: 'username', required: true });
  const password = h('input', { type: 'password', autocomplete: 'current-password', required: true });
  const submit = h('button', { class: 'primary', type: 'submit' }, 'Sign in');
  const form = h('form', { class: 'grid card', novalidate: true },
    ...field('E-mail', 'email', email), ...field('Password', 'password', password),
    h('span'), h('div', {}, submit, h('div', { class: 'field-error form-error', role: 'alert' })));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearErrors(form);
    const local = [];
    if (!email.value.includes('@')) local.push({ field: 'email', reason: 'enter your e-mail address' });
    if (!password.value) local.push({ field: 'password', reason: 'enter your password' });
    if (local.length) { showErrors(form, { fields: local, message: '' }); return; }
    submit.disabled = true;
    submit.textContent = 'Signing in…';
    try {
      await api('POST', '/v1/session', { email: email.value, password: password.value });
      await afterSignIn();
    } catch (e) {
      showErrors(form, e);
    } finally {
      submit.disabled = false;
      submit.textContent = 'Sign in';
    }
  });
  main.append(h('h1', {}, 'Sign in to gpucloud'), form);
  email.focus();
}
